"""The bundled text is the file its header names, and a step's batch is the same wherever it is drawn."""

import numpy as np
import pytest

from mlsys_lab.capstone.text import TEXT_PATH, corpus, global_batch, load_text, shard_rows


def test_the_text_is_the_public_domain_slice_its_header_names():
    header = TEXT_PATH.read_text().split("# ---", 1)[0]
    assert "public domain" in header and "github.com/karpathy/char-rnn" in header and "License" in header
    text = load_text()
    assert len(text) == 299_868 and text.startswith("First Citizen:\nBefore we proceed any further")
    assert TEXT_PATH.stat().st_size < 400_000  # a few hundred KB at most


def test_tokens_are_characters_and_round_trip():
    c = corpus()
    assert c.vocab_size == 62 and c.chars == "".join(sorted(set(load_text())))
    assert c.decode(c.encode("ROMEO:\nO, she doth teach")) == "ROMEO:\nO, she doth teach"
    assert c.decode(c.tokens[:14]) == "First Citizen:"


def test_a_steps_batch_depends_on_the_step_only_and_targets_are_shifted():
    tokens = corpus().tokens
    x, y = global_batch(tokens, 7, 5, 16)
    x2, y2 = global_batch(tokens, 7, 5, 16)
    assert x.shape == y.shape == (5, 16) and x.dtype == np.int64
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    assert np.array_equal(x[:, 1:], y[:, :-1])
    assert not np.array_equal(global_batch(tokens, 8, 5, 16)[0], x)
    with pytest.raises(ValueError, match="step"):
        global_batch(tokens, -1, 5, 16)


def test_shards_cover_the_batch_unevenly_when_ranks_do_not_divide_it():
    shards = shard_rows(15, 2)
    assert [len(s) for s in shards] == [8, 7] and np.array_equal(np.concatenate(shards), np.arange(15))
    with pytest.raises(ValueError, match="n_ranks"):
        shard_rows(3, 4)
