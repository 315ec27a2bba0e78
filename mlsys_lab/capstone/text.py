"""The capstone's data: 300 KB of Shakespeare, one token per character, and the global batch of every step.

The text ships with the course (``mlsys_lab/data/shakespeare_char.txt``: the first 299,868 bytes of char-rnn's
tinyshakespeare, public domain; its header names the source, the license and the SHA-256 checked here). The
vocabulary is the sorted set of its characters (62 of them), so a token id is a character's rank.

A step's global batch is a pure function of ``(seed, step)``: ``batch_size`` windows of ``context + 1`` tokens
starting at random offsets drawn from ``default_rng((seed, step))``. Every rank of a data-parallel run, a run
resumed after a kill and the single-process run therefore see the same batches in the same order, with no data
loader state to checkpoint. Rank r trains on rows ``np.array_split`` gives it (:func:`shard_rows`): uneven when
the ranks do not divide the batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from mlsys_lab.validation import check_array, check_int, check_str

TEXT_PATH = Path(__file__).resolve().parents[1] / "data" / "shakespeare_char.txt"
TEXT_SHA256 = "7bce277f2f9d6c2c5ebb6307101f7b5a6fe4ada24dd87971bd874d4bed8d503b"
HEADER_END = "# " + "-" * 106 + "\n"


@lru_cache(maxsize=1)
def load_text() -> str:
    """The bundled text without its header; ValueError if its bytes are not the ones the header names."""
    raw = TEXT_PATH.read_bytes()
    marker = HEADER_END.encode()
    if marker not in raw:
        raise ValueError(f"{TEXT_PATH} has no header line of dashes")
    body = raw.split(marker, 1)[1]
    if hashlib.sha256(body).hexdigest() != TEXT_SHA256:
        raise ValueError(f"{TEXT_PATH}: the text's SHA-256 is not {TEXT_SHA256} (the file was changed)")
    return body.decode("ascii")


@dataclass(frozen=True)
class Corpus:
    """The text as token ids (uint8) and the characters they stand for."""

    tokens: np.ndarray  # (n_chars,) uint8
    chars: str  # the vocabulary, sorted: chars[id] is the character of token id

    def __post_init__(self) -> None:
        tokens = check_array("tokens", self.tokens, ndim=1, kinds="iu")
        check_str("chars", self.chars)
        if int(tokens.max()) >= len(self.chars) or int(tokens.min()) < 0:
            raise ValueError(f"tokens must be ids of chars (0 … {len(self.chars) - 1}); got {int(tokens.min())} "
                             f"… {int(tokens.max())}")

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        lookup = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(check_str("text", text, nonempty=False)) - set(lookup))
        if unknown:
            raise ValueError(f"text must use the corpus's characters; {''.join(unknown)!r} are not among them")
        return np.array([lookup[c] for c in text], dtype=np.uint8)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


@lru_cache(maxsize=1)
def corpus() -> Corpus:
    """The bundled text, tokenized by character."""
    text = load_text()
    chars = "".join(sorted(set(text)))
    lookup = np.zeros(128, dtype=np.uint8)
    lookup[[ord(c) for c in chars]] = np.arange(len(chars), dtype=np.uint8)
    return Corpus(lookup[np.frombuffer(text.encode("ascii"), dtype=np.uint8)], chars)


def global_batch(tokens: np.ndarray, step: int, batch_size: int, context: int, seed: int = 0):
    """Inputs and next-token targets of step ``step``: two int64 arrays of shape (batch_size, context).

    Row b is the window ``tokens[o_b : o_b + context]`` and its shift by one, with offsets ``o_b`` drawn from
    ``default_rng((seed, step))``: the same batch for a given step on every rank and after every restart.
    """
    tokens = check_array("tokens", tokens, ndim=1, kinds="iu", min_size=3)
    if int(tokens.min()) < 0:
        raise ValueError(f"tokens must be token ids (>= 0); got {int(tokens.min())}")
    check_int("step", step, low=0)
    check_int("batch_size", batch_size, low=1, high=1 << 20)
    check_int("context", context, low=1, high=1 << 16)
    if len(tokens) < context + 2:
        raise ValueError(f"tokens must hold more than context + 1 = {context + 1} ids; got {len(tokens)}")
    check_int("seed", seed, low=0)
    offsets = np.random.default_rng((seed, step)).integers(0, len(tokens) - context - 1, size=batch_size)
    windows = tokens[offsets[:, None] + np.arange(context + 1)].astype(np.int64)  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]


def shard_rows(batch_size: int, n_ranks: int) -> list[np.ndarray]:
    """Row indices of each rank's share of a global batch (``np.array_split``: sizes differ by at most one)."""
    check_int("batch_size", batch_size, low=1, high=1 << 20)
    check_int("n_ranks", n_ranks, low=1, high=batch_size)
    return np.array_split(np.arange(batch_size), n_ranks)
