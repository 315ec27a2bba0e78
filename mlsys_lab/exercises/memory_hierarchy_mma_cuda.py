"""The tensor-core exercise of 04_memory_hierarchy: a BF16 tile GEMM on ``mma.sync``, fed by ``ldmatrix`` (sm_80 up).

``bf16_mma_cuda(a_bits, b_bits)`` is the learner's launcher: A (M, K) and B (N, K), row-major BF16 stored as their
uint16 bit patterns (NumPy has no bfloat16), on the GPU; it returns C = A · Bᵀ as a new (M, N) float32 device
array, computed by the learner's kernel: 64 x 64 x 32 block tiles staged in shared memory, each warp's fragments
loaded with ``ldmatrix`` and multiplied with ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``, the FP32
accumulators stored from the m16n8 fragment layout. M and N must be multiples of 64, K of 32 (:func:`mma_shapes`).

The tolerance is the worst case of FP32 accumulation, element by element (:func:`accumulation_bound`): the inputs
are exact BF16 values, and a product of two of them (8 + 8 significant bits) is exact in FP32; what differs from
the float64 product is only the rounding of the K-term sum, at most K · 2⁻²⁴ · Σ_k |A_ik| |B_jk| in any order of
summation. A dropped k-slice, a row of the fragment written to the wrong row or C rounded to BF16 costs far more.

The check refuses, in one line, a GPU below compute capability 8.0 (Colab's T4 is 7.5: no BF16 ``mma.sync``),
before the learner's source is compiled. Its race is compute-bound: TFLOP/s against cuBLAS BF16 (``cublasGemmEx``
on the same bits, FP32 output) and the course's ``mma_ldmatrix`` step of the tensor-core ladder, the same mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab import backend
from mlsys_lab.exercises import Case, not_graded_here, rng, short
from mlsys_lab.exercises.cuda_kernels import KernelRace, TimedCase, check_kernel, float32_result, launcher, speed_point
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import bf16_gemm, from_bf16_bits, to_bf16_bits
from mlsys_lab.kernels.memory_hierarchy.sgemm import sgemm

NAME = "bf16_mma_cuda"
MIN_CAPABILITY = (8, 0)  # BF16 mma.sync m16n8k16 and ldmatrix: Ampere (sm_80) and newer
NEEDS = "a CUDA GPU of compute capability 8.0 or newer (sm_80: A100, A10, L4, H100)"
WHERE = "Colab's free T4 is sm_75, without BF16 mma.sync: choose an A100 or L4 runtime"
UNIT_ROUNDOFF_FP32 = 2.0**-24
# The floor, a fraction of the speed of the course's mma_ldmatrix step (128 x 128 x 32 tiles, 4-way bank conflicts
# on every ldmatrix). Without tensor cores (FP32 FMAs over the same BF16 values) a kernel runs at a fraction of it.
FLOOR = 0.5
TIMED_SHAPE = (4096, 4096, 4096)  # M, N, K: 137 GFLOP
SLOW_HINT = ("a correct kernel this slow usually multiplies on the CUDA cores (FMAs, no mma.sync), leaves its "
             "shared tiles unpadded (8 rows of an ldmatrix phase on the same banks) or gives a block too few warps")


def _example() -> tuple[np.ndarray, np.ndarray]:
    """The prompt's example: A 64 x 32 with A[i, k] = 1 where k = i mod 32, else 0; B 64 x 32 with B[j, k] = j - k.
    So C[i, j] = B[j, i mod 32] = j - i mod 32 (integers below 256: exact in BF16)."""
    a = (np.arange(32) == np.arange(64)[:, None] % 32).astype(np.float32)
    b = (np.arange(64)[:, None] - np.arange(32)).astype(np.float32)
    return to_bf16_bits(a), to_bf16_bits(b)


EXAMPLE = _example()


def accumulation_bound(abs_product: np.ndarray, k: int) -> np.ndarray:
    """K · 2⁻²⁴ · (|A| · |B|ᵀ), element by element: how far an FP32 sum of K exact products may land from the exact
    sum, whatever the order of summation (Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5:
    |fl(Σ x) − Σ x| ≤ γ_(K−1) Σ |x|; each partial sum is no larger than Σ |x|). The final rounding of C to FP32
    is one more roundoff; the tensor cores' few roundings per 16 products keep them well inside."""
    return (k + 1) * UNIT_ROUNDOFF_FP32 * np.asarray(abs_product, dtype=np.float64)


@dataclass(frozen=True)
class MmaProduct:
    """A case's exact C (the float64 product of the BF16 inputs) and the error FP32 accumulation may add to it."""

    exact: np.ndarray  # (M, N) float64
    bound: np.ndarray  # (M, N): accumulation_bound

    def __repr__(self) -> str:
        return short(self.exact)


def exact_product(a_bits: np.ndarray, b_bits: np.ndarray) -> MmaProduct:
    """A · Bᵀ of the BF16 inputs in float64 (each product exact; the sum to float64's 2⁻⁵³, far inside the bound)
    with its :func:`accumulation_bound`. a_bits (M, K), b_bits (N, K) uint16 -> (M, N)."""
    a, b = from_bf16_bits(a_bits).astype(np.float64), from_bf16_bits(b_bits).astype(np.float64)
    return MmaProduct(a @ b.T, accumulation_bound(np.abs(a) @ np.abs(b).T, a.shape[1]))


def close_to_product(got, expected: MmaProduct) -> bool:
    """A float array of C's shape with ``|got − exact| ≤ bound`` everywhere (NaN and inf fail: an element the
    kernel never wrote is wrong)."""
    if not isinstance(got, np.ndarray) or got.shape != expected.exact.shape or got.dtype.kind != "f":
        return False
    return bool(np.all(np.abs(got.astype(np.float64) - expected.exact) <= expected.bound))


def _bits(g, m: int, k: int, kind: str = "normal") -> np.ndarray:
    if kind == "positive":
        x = g.uniform(0.0, 1.0, size=(m, k))
    elif kind == "scaled rows":  # magnitudes 2^-6 to 2^6 by row: a row written to another row is far off
        x = g.standard_normal((m, k)) * np.exp2(g.integers(-6, 7, size=(m, 1)))
    else:
        x = g.standard_normal((m, k))
    return to_bf16_bits(x.astype(np.float32))


def _case(label: str, a_bits: np.ndarray, b_bits: np.ndarray) -> Case:
    m, k = a_bits.shape
    return Case(f"{label}: M, N, K = {m}, {b_bits.shape[0]}, {k}", (a_bits, b_bits),
                expected=exact_product(a_bits, b_bits), check_result=float32_result)


def bf16_mma_cases(g) -> list[Case]:
    """The example; one block tile (64 x 64 x 32, K a single slice); non-square shapes (A and B swapped, rows and
    columns swapped, a launch grid sized on the wrong axis); K of one slice with many blocks; all-positive inputs
    (no cancellation); rows of different magnitudes; random multiples; a 512 x 384 x 1024."""
    shapes = [("one block tile, one K slice", 64, 64, 32, "normal"),
              ("K of one slice, 2 x 3 blocks", 128, 192, 32, "normal"),
              ("square: C is not its transpose", 128, 128, 96, "normal"),
              ("wide", 64, 320, 64, "normal"), ("tall", 256, 64, 160, "normal"),
              ("all-positive inputs", 128, 192, 512, "positive"),
              ("rows of different magnitudes", 192, 128, 128, "scaled rows")]
    shapes += [("random multiples", 64 * int(g.integers(1, 7)), 64 * int(g.integers(1, 7)), 32 * int(g.integers(1, 17)),
                "normal") for _ in range(2)]
    shapes.append(("large", 512, 384, 1024, "normal"))
    cases = [_case("the example", *EXAMPLE)]
    for label, m, n, k, kind in shapes:
        cases.append(_case(label, _bits(g, m, k, kind), _bits(g, n, k, kind)))
    return cases


# ------------------------------------------------------------------ the race: cuBLAS BF16 and the course's step
CUDA_R_32F, CUDA_R_16BF = 0, 14  # cudaDataType_t
CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUBLAS_OP_T = 68, -1, 0, 1


def _cublas_bf16(a_bits, b_bits):
    """cuBLAS on the same problem: C (M, N) float32 = A · Bᵀ from the BF16 bits, FP32 accumulation (cublasGemmEx,
    "TN": row-major C = A · Bᵀ is column-major Cᵀ = B · Aᵀ, with both operands K-major)."""
    from cupy_backends.cuda.libs import cublas  # noqa: PLC0415  (CuPy: only where a GPU answers)

    xp = backend.xp
    (m, k), n = a_bits.shape, b_bits.shape[0]
    c = xp.empty((m, n), dtype=xp.float32)
    one, zero = np.ones(1, dtype=np.float32), np.zeros(1, dtype=np.float32)
    handle = xp.cuda.device.get_cublas_handle()
    mode = cublas.getPointerMode(handle)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    try:
        cublas.gemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, one.ctypes.data, b_bits.data.ptr, CUDA_R_16BF, k,
                      a_bits.data.ptr, CUDA_R_16BF, k, zero.ctypes.data, c.data.ptr, CUDA_R_32F, n,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
    finally:
        cublas.setPointerMode(handle, mode)
    return c


def _widened(bits):
    """BF16 bits -> float32 on the device (exact: the low 16 bits of the float32 are zero)."""
    xp = backend.xp
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


def _device_product(a_bits: np.ndarray, b_bits: np.ndarray) -> MmaProduct:
    """:func:`exact_product` with its two float64 GEMMs on the GPU (the timed case is too large for one CPU core)."""
    xp = backend.xp
    a, b = (_widened(xp.asarray(x)).astype(xp.float64) for x in (a_bits, b_bits))
    exact = backend.asnumpy(a @ b.T)
    abs_product = backend.asnumpy(xp.abs(a) @ xp.abs(b).T)
    return MmaProduct(exact, accumulation_bound(abs_product, a.shape[1]))


LOOKALIKES = {
    "the course's best SGEMM on the CUDA cores, no tensor cores (use mma.sync)":
        lambda a, b: sgemm(_widened(a), _widened(b).T, "warptile_db"),
}


def bf16_mma_timed(g) -> TimedCase:
    m, n, k = TIMED_SHAPE
    a_bits, b_bits = _bits(g, m, k), _bits(g, n, k)
    return TimedCase(f"M = N = K = {m}", (a_bits, b_bits), lambda a, b: bf16_gemm(a, b, "mma_ldmatrix"),
                     2 * (m * k + n * k) + 4 * m * n, FLOOR, SLOW_HINT,
                     expected_of=lambda course_bits: _device_product(a_bits, b_bits), lookalikes=LOOKALIKES,
                     n_flops=2 * m * n * k, anchor=_cublas_bf16, anchor_label="cuBLAS")


def gradable_here() -> bool:
    """Whether this machine's GPU has BF16 mma.sync (compute capability 8.0 or newer)."""
    capability = backend.compute_capability()
    return backend.on_gpu and capability is not None and tuple(capability) >= MIN_CAPABILITY


@speed_point
def check_bf16_mma_cuda(fn) -> None:
    """``fn(a_bits, b_bits)`` -> A · Bᵀ (M, N), float32, on a GPU of compute capability 8.0 or newer: 11 cases,
    each element within (K + 1) · 2⁻²⁴ · (|A| · |B|ᵀ) of the float64 product; then timed against the course's
    mma_ldmatrix step and cuBLAS BF16 (floor 50% of the course's step)."""
    if not gradable_here():  # a T4 cannot even compile the learner's mma.sync: say so before anything runs
        not_graded_here(NAME, NEEDS, WHERE)
        return
    g = rng()
    check_kernel(NAME, fn, lambda: bf16_mma_cases(g), close_to_product, lambda: bf16_mma_timed(g))


def race_bf16_mma_cuda(fn) -> KernelRace:
    """The learner's ``bf16_mma_cuda`` timed beside the course's mma_ldmatrix step and cuBLAS BF16 ("see it")."""
    loader.require_gpu("race_bf16_mma_cuda")
    if not gradable_here():
        raise loader.GPUTooOld(f"race_bf16_mma_cuda needs {NEEDS}; this GPU is compute capability "
                               f"{backend.compute_capability()}")
    return bf16_mma_timed(rng()).race(launcher(fn))[0]
