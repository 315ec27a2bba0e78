"""Mixed precision (混合精度): fp16, bf16 and FP8 from their bit layouts, loss scaling, fp32 master weights.

A binary float with e exponent bits and m mantissa bits (bias 2^(e−1) − 1; the all-ones exponent is inf/NaN):

    largest finite     (2 − 2^−m) · 2^(2^e − 2 − bias)       fp16 (5, 10): 65504      bf16 (8, 7): 3.39·10³⁸
    smallest normal    2^(1 − bias)                          fp16: 6.1·10⁻⁵           bf16: 1.2·10⁻³⁸
    smallest subnormal 2^(1 − bias − m)                      fp16: 6.0·10⁻⁸           bf16: 9.2·10⁻⁴¹
    epsilon            2^−m (the gap after 1)                fp16: 9.8·10⁻⁴           bf16: 7.8·10⁻³

fp16 has precision and too little range: small gradients flush to zero, so mixed-precision training in fp16
multiplies the loss by a scale S before the backward and divides the gradients by S after it (Micikevicius et al.
2018, "loss scaling"; dynamic: halve S and skip the step on inf/NaN, double it after N clean steps). bf16 has
fp32's range and little precision: no loss scaling, but an update smaller than ε/2 of a weight is lost if the
weight is stored in bf16 (or fp16), hence the fp32 *master* copy the optimizer updates.
:func:`loss_scaler_step` is one step of that dynamic scaler as PyTorch's ``GradScaler`` takes it.

NumPy has float16 but no bfloat16: :func:`to_bfloat16` emulates it on float32 arrays by dropping the low 16 bits
of each float32 (truncation, or round-to-nearest-even as hardware converts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.training_memory.weight_compression import to_bfloat16_bits
from mlsys_lab.validation import (
    check_array,
    check_choice,
    check_finite,
    check_int,
    check_number,
    check_type,
)

FP32_MAX = float(np.finfo(np.float32).max)
MIN_LOSS_SCALE = 2.0 ** -100  # below it 65504 / scale leaves float32's range


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format by its field widths; every limit computed from the bits."""

    name: str
    exponent_bits: int
    mantissa_bits: int  # stored fraction bits (the leading 1 of a normal number is implicit)
    # IEEE 754 keeps the all-ones exponent for inf and NaN. A "finite-only" format (FP8 E4M3 of the OCP 8-bit
    # floating-point specification, which Hopper's tensor cores use) has no inf and spends only the all-ones
    # exponent *and* mantissa on NaN: the rest of that exponent holds numbers, so its largest is 448, not 240.
    finite_only: bool = False

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_int("exponent_bits", self.exponent_bits, low=2, high=11)
        check_int("mantissa_bits", self.mantissa_bits, low=1, high=52)
        check_type("finite_only", self.finite_only, bool)

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max(self) -> float:
        """(2 − 2^−m) · 2^(2^e − 2 − bias): the all-ones mantissa at the largest exponent that is not inf/NaN; for
        a finite-only format (2 − 2^(1−m)) · 2^(2^e − 1 − bias): the all-ones exponent, its mantissa one below NaN's."""
        if self.finite_only:
            return (2.0 - 2.0 ** (1 - self.mantissa_bits)) * 2.0 ** (2 ** self.exponent_bits - 1 - self.bias)
        return (2.0 - 2.0 ** -self.mantissa_bits) * 2.0 ** (2 ** self.exponent_bits - 2 - self.bias)

    def decode(self, code: int) -> float:
        """The value of the bit pattern ``code`` (sign, exponent, mantissa from the high bit down), by the format's
        rules: subnormals at exponent 0, inf/NaN at the all-ones exponent (or NaN only, when finite-only)."""
        check_int("code", code, low=0, high=2 ** self.n_bits - 1)
        m_bits, e_bits = self.mantissa_bits, self.exponent_bits
        sign = -1.0 if code >> (e_bits + m_bits) else 1.0
        exponent, mantissa = (code >> m_bits) & (2 ** e_bits - 1), code & (2 ** m_bits - 1)
        top = 2 ** e_bits - 1
        if exponent == top and (not self.finite_only or mantissa == 2 ** m_bits - 1):
            return float("nan") if (mantissa or self.finite_only) else sign * float("inf")
        if exponent == 0:
            return sign * mantissa * 2.0 ** (1 - self.bias - m_bits)
        return sign * (1 + mantissa * 2.0 ** -m_bits) * 2.0 ** (exponent - self.bias)

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def epsilon(self) -> float:
        """The gap between 1 and the next number: 2^−m."""
        return 2.0 ** -self.mantissa_bits

    @property
    def n_bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits


FP16 = FloatFormat("fp16", 5, 10)
BF16 = FloatFormat("bf16", 8, 7)
FP32 = FloatFormat("fp32", 8, 23)
# Hopper's two 8-bit formats (OCP OFP8 v1.0; Micikevicius et al. 2022, "FP8 Formats for Deep Learning"): E4M3 for
# weights and activations (more precision), E5M2 for gradients (more range, IEEE-style inf and NaN).
FP8_E4M3 = FloatFormat("e4m3", 4, 3, finite_only=True)
FP8_E5M2 = FloatFormat("e5m2", 5, 2)


def to_bfloat16(x, rounding: str = "truncate") -> np.ndarray:
    """bfloat16 values of ``x``, as float32: the low 16 bits of each float32 cleared ("truncate", toward zero)
    or rounded away ("nearest": round-to-nearest-even, :func:`weight_compression.to_bfloat16_bits`)."""
    check_choice("rounding", rounding, ("truncate", "nearest"))
    x32 = np.asarray(check_array("x", x, kinds="fiu", min_size=0, finite=True), dtype=np.float32)
    flat = np.ascontiguousarray(x32.reshape(-1))
    if rounding == "nearest":
        out = (to_bfloat16_bits(flat).astype(np.uint32) << 16).view(np.float32)
    else:
        out = (flat.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return out.reshape(x32.shape)


def to_float16(x) -> np.ndarray:
    """``x`` (finite) stored in fp16 (round to nearest): above 65504 becomes inf, below 2⁻²⁵ becomes 0."""
    array = check_array("x", x, kinds="fiu", min_size=0, finite=True)
    with np.errstate(over="ignore"):
        return np.asarray(array, dtype=np.float64).astype(np.float16)


def cast(x, dtype: str) -> np.ndarray:
    """``x`` stored in "fp16", "bf16" (truncated float32) or "fp32", returned as that type (bf16 as float32)."""
    check_choice("dtype", dtype, ("fp16", "bf16", "fp32"))
    if dtype == "fp16":
        return to_float16(x)
    if dtype == "bf16":
        return to_bfloat16(x)
    return np.asarray(check_array("x", x, kinds="fiu", min_size=0, finite=True), dtype=np.float32)


@dataclass(frozen=True)
class ScaledCast:
    """Gradients multiplied by each loss scale and stored in a 16-bit format: what survives."""

    scales: np.ndarray
    flushed_fraction: np.ndarray  # of the nonzero gradients, those that became 0
    overflow_fraction: np.ndarray  # those that became inf

    def __post_init__(self) -> None:
        n = check_array("scales", self.scales, ndim=1, finite=True).shape[0]
        for name in ("flushed_fraction", "overflow_fraction"):
            if check_array(name, getattr(self, name), ndim=1, finite=True).shape[0] != n:
                raise ValueError(f"scales and {name} must have one entry per scale; got {n} scales and "
                                 f"{len(getattr(self, name))} fractions")


def scaled_cast_fractions(gradients, scales, dtype: str = "fp16") -> ScaledCast:
    """For each scale S: the fraction of the nonzero entries of ``gradients`` that S·g stored in ``dtype``
    flushes to zero and the fraction that overflows to inf (Micikevicius et al. 2018, Fig. 3's question)."""
    g = np.asarray(check_array("gradients", gradients, kinds="f", finite=True), dtype=np.float64).ravel()
    s = np.asarray(check_array("scales", scales, ndim=1, kinds="fiu", finite=True), dtype=np.float64)
    if (s <= 0).any():
        raise ValueError(f"scales must all be > 0; got {s.min():g}")
    nonzero = g[g != 0]
    if nonzero.size == 0:
        raise ValueError("gradients must have at least one nonzero entry")
    flushed, overflow = [], []
    for scale in s:
        stored = np.asarray(cast(scale * nonzero, dtype), dtype=np.float64)
        flushed.append(float(np.mean(stored == 0)))
        overflow.append(float(np.mean(np.isinf(stored))))
    return ScaledCast(s, np.array(flushed), np.array(overflow))


def accumulate_updates(weight: float, update: float, n_steps: int, dtype: str) -> float:
    """The weight after ``n_steps`` of w ← store(w + update) in ``dtype``: small updates vanish in 16-bit weights."""
    w = check_finite("weight", weight)
    u = check_finite("update", update)
    n = check_int("n_steps", n_steps, low=0, high=10**6)
    value = cast(np.array([w]), dtype)
    for _ in range(n):
        value = cast(np.asarray(value, dtype=np.float64) + u, dtype)
    return float(np.asarray(value, dtype=np.float64)[0])


def loss_scaler_step(grads16, scale: float, good_steps: int, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                     growth_interval: int = 2000) -> tuple[np.ndarray, bool, float, int]:
    """One step of dynamic loss scaling, as PyTorch's ``GradScaler`` takes it (``torch/amp/grad_scaler.py``).

    ``grads16``: the float16 gradient of ``scale`` × loss. Returns ``(grads, found_inf, new_scale, new_good_steps)``:

    * ``grads``: unscaled in float32 as ``unscale_`` does it: ``float32(grads16) * inv_scale`` with the reciprocal
      ``inv_scale = float32(1 / float64(scale))`` taken in float64 and rounded once to float32 (PyTorch:
      ``self._scale.double().reciprocal().float()``, then ``_amp_foreach_non_finite_check_and_unscale_``
      multiplies); returned even on an overflow, as ``unscale_`` leaves them in ``.grad``;
    * ``found_inf``: any entry inf or NaN (the caller skips its optimizer step, as ``GradScaler.step`` does);
    * ``new_scale``, ``new_good_steps`` as ``update`` (``_amp_update_scale_``): on found_inf scale × backoff and
      0; otherwise the count of clean steps plus one, and when it reaches ``growth_interval``, scale × growth and 0.
      The scale is a float32 number there (product in float64, rounded to float32), and a growth that would
      overflow float32 leaves it as it was.
    """
    g16 = check_array("grads16", grads16, kinds="f", min_size=0)
    if g16.dtype != np.float16:
        raise TypeError(f"grads16 must be a float16 array (the gradient an fp16 backward hands over); got dtype "
                        f"{g16.dtype}")
    scale32 = np.float32(check_number("scale", scale, low=MIN_LOSS_SCALE, high=FP32_MAX))
    growth_factor = check_finite("growth_factor", growth_factor, low=1.0, low_inclusive=False)
    backoff_factor = check_number("backoff_factor", backoff_factor, low=0.0, high=1.0, low_inclusive=False,
                                  high_inclusive=False)
    growth_interval = check_int("growth_interval", growth_interval, low=1)
    if check_int("good_steps", good_steps, low=0) >= growth_interval:
        raise ValueError(f"good_steps must be below growth_interval={growth_interval} (the count restarts when it "
                         f"reaches it); got {good_steps}")
    inv_scale = np.float32(1.0 / np.float64(scale32))
    grads = np.asarray(g16, dtype=np.float32) * inv_scale
    found_inf = not bool(np.isfinite(g16).all())
    if found_inf:
        return grads, True, float(np.float32(np.float64(scale32) * backoff_factor)), 0
    if good_steps + 1 < growth_interval:
        return grads, False, float(scale32), good_steps + 1
    with np.errstate(over="ignore"):
        grown = np.float32(np.float64(scale32) * growth_factor)
    return grads, False, float(grown if np.isfinite(grown) else scale32), 0
