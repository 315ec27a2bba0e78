"""The three kinds of ML program the notes name (ML 应用的分类), as the numbers a systems engineer needs.

* task-specific deep-learning models (ResNet, ViT, speech, NLP classifiers): one forward pass per input;
* large language models: autoregressive decoding, one token per forward pass, every pass reading all the
  weights and the **KV cache** of every earlier token (:func:`kv_cache_bytes`, :func:`decode_step`);
* diffusion models: iterative inference, one full network pass per denoising step, the timestep an input
  (:func:`diffusion_evaluations`).

All three are "foundation models" in the notes' sense: large compute (matmuls), large memory (weights and
activations or KV cache) and large communication when spread over devices (lessons 07-08).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.hardware import H200, Hardware
from mlsys_lab.operators.cost import OpCost, time_lower_bound_seconds
from mlsys_lab.validation import check_bool, check_finite, check_int


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int = 1, batch: int = 1,
                   bytes_per_element: float = 2) -> float:
    """Bytes of the KV cache: a key and a value vector per layer, KV head and token.

    2 · n_layers · n_kv_heads · head_dim · seq_len · batch · bytes_per_element. With multi-head attention
    n_kv_heads = n_heads; grouped-query attention (Llama 2 70B, Llama 3) shares each KV head among
    several query heads, which divides the cache by n_heads / n_kv_heads.
    """
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                        ("seq_len", seq_len), ("batch", batch)):
        check_int(name, value, low=0 if name in ("seq_len", "batch") else 1)
    check_finite("bytes_per_element", bytes_per_element, low=0.125)
    return 2.0 * n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element


@dataclass(frozen=True)
class DecodeStep:
    """One autoregressive step of a decoder-only LLM at batch ``batch`` with ``context`` tokens cached."""

    flop: float           # 2 FLOP per parameter per token (multiply-add), attention over the cache left out
    weight_bytes: float   # every weight is read once per step, whatever the batch
    kv_bytes: float       # the cache read by the attention layers
    seconds_lower_bound: float  # max(compute time, memory time) on the given hardware

    def __post_init__(self) -> None:
        for name in ("flop", "weight_bytes", "kv_bytes", "seconds_lower_bound"):
            check_finite(name, getattr(self, name), low=0.0)

    @property
    def n_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """FLOP per byte: about ``batch`` for fp16 weights and a short context, far below any GPU's ridge."""
        return self.flop / self.n_bytes


def decode_step(n_params: float, kv_bytes_per_token: float, context: int, batch: int = 1,
                bytes_per_param: float = 2, hardware: Hardware = H200, dtype: str = "bf16") -> DecodeStep:
    """Cost of generating one token for each of ``batch`` sequences, each with ``context`` tokens cached."""
    check_finite("n_params", n_params, low=1)
    check_finite("kv_bytes_per_token", kv_bytes_per_token, low=0)
    check_finite("bytes_per_param", bytes_per_param, low=0, low_inclusive=False)
    check_int("context", context, low=0)
    check_int("batch", batch, low=1)
    flop = 2.0 * n_params * batch
    weight_bytes = n_params * bytes_per_param
    kv_bytes = kv_bytes_per_token * context * batch
    step = OpCost("decode step", "tensor", flop, weight_bytes + kv_bytes)
    return DecodeStep(flop, weight_bytes, kv_bytes, time_lower_bound_seconds(step, hardware, dtype))


def diffusion_evaluations(n_images: int, steps: int, guidance: bool = True) -> int:
    """Network evaluations to generate ``n_images``: one per denoising step, two with classifier-free
    guidance (a conditional and an unconditional pass). The steps are sequential: step t needs step t+1."""
    check_int("n_images", n_images, low=1)
    check_int("steps", steps, low=1)
    check_bool("guidance", guidance)
    return n_images * steps * (2 if guidance else 1)
