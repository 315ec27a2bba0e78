"""Launchers for the BF16 tensor-core GEMM ladder in ``memory_hierarchy/bf16_gemm.cu``: C = A · Bᵀ.

A (M, K) and B (N, K) are row-major BF16, C (M, N) BF16; products accumulate in FP32. NumPy has no
bfloat16, so arrays hold the 16-bit patterns as ``uint16`` (:func:`to_bf16_bits` rounds float32 to the
nearest even bfloat16, :func:`from_bf16_bits` widens back exactly). BF16 keeps float32's 8 exponent bits
and 7 of its 23 mantissa bits: one rounding costs a relative error up to 2⁻⁸ (about 2⁻⁹·⁵ on average).

==============  ===============================================================  ====================
step            what it adds                                                     block tile, threads
==============  ===============================================================  ====================
wmma            tensor cores through the warp-wide WMMA fragments                128 x 128 x 32, 256
mma_ldmatrix    PTX ``mma.sync.m16n8k16`` + ``ldmatrix``; explicit fragments     128 x 128 x 32, 256
pipeline        ``cp.async`` 3-stage ring, XOR-swizzled tiles, 64 x 64 warp tiles  128 x 256 x 64, 256
wgmma           Hopper: TMA + mbarriers + ``wgmma.m64n256k16`` (sm_90a only)      128 x 256 x 64, 384
==============  ===============================================================  ====================

:func:`gemm_reference` is the answer every step is checked against: the float64 product of the BF16
inputs (exactly representable), rounded to float32. The relative Frobenius error of a step's BF16 output
against it is dominated by the final rounding to BF16, about 2⁻⁹·⁵ ≈ 1.3e-3; :data:`RELATIVE_ERROR_BOUND`
leaves room for FP32 accumulation but not for a dropped tile (which costs ~1/sqrt(K/BK)).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.tma import tensor_map
from mlsys_lab.occupancy import limits_of, occupancy
from mlsys_lab.validation import check_array, check_bool, check_choice, check_int, check_type

SOURCE = "memory_hierarchy/bf16_gemm.cu"
RELATIVE_ERROR_BOUND = 4e-3  # relative Frobenius error of a BF16 output (rounding alone: ~1.3e-3)
BANK_WORD_BYTES = 4


def to_bf16_bits(x) -> np.ndarray:
    """float32 -> the uint16 patterns of the nearest bfloat16 (ties to even; NaN stays NaN)."""
    check_array("x", backend.asnumpy(x), kinds="fiub", min_size=0)
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint32(0x7FC0), rounded).astype(np.uint16)


def from_bf16_bits(bits) -> np.ndarray:
    """uint16 bfloat16 patterns -> float32 (exact: the low 16 mantissa bits are zero)."""
    bits = check_array("bits", backend.asnumpy(bits), kinds="iu", min_size=0)
    if bits.dtype != np.uint16 and bits.size and (bits.min() < 0 or bits.max() > 0xFFFF):
        raise ValueError(f"bits must be 16-bit patterns in [0, 65535] (uint16); got values in [{bits.min()}, "
                         f"{bits.max()}]")
    return np.asarray((np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32))


def gemm_reference(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """NumPy reference C = A · Bᵀ: the float64 product of the BF16 inputs, rounded to float32. (M, N)."""
    a, b = from_bf16_bits(check_array("a_bits", a_bits, ndim=2, kinds="iu")).astype(np.float64), \
        from_bf16_bits(check_array("b_bits", b_bits, ndim=2, kinds="iu")).astype(np.float64)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a_bits (M, K) and b_bits (N, K) must share K; got {a.shape} and {b.shape}")
    return (a @ b.T).astype(np.float32)


@dataclass(frozen=True)
class Bf16Step:
    """One kernel of the ladder: name in the .cu file, tiles, launch shape, and its shared-memory layout."""

    name: str
    function: str
    idea: str
    tile: tuple[int, int, int]  # (BM, BN, BK): M, N, K must be multiples
    threads: int
    dynamic_smem_bytes: int  # 0: static shared memory only
    smem_row_bytes: int  # bytes of one tile row in shared memory (padding included)
    swizzled: bool  # 16-byte chunk index XOR row % 8
    grouped: bool  # 1-D grid walked in L2-friendly groups of tile rows
    arch: str | None = None  # compile target when it must be exact ("sm_90a")

    def __post_init__(self) -> None:
        for label in ("name", "function", "idea"):
            check_type(label, getattr(self, label), str)
        if self.arch is not None:
            check_type("arch", self.arch, str)
        if not isinstance(self.tile, tuple) or len(self.tile) != 3:
            raise ValueError(f"tile must be a (BM, BN, BK) tuple of 3 integers; got {self.tile!r:.60}")
        for size in self.tile:
            check_int("tile", size, low=1)
        check_int("threads", self.threads, low=32)
        check_int("dynamic_smem_bytes", self.dynamic_smem_bytes, low=0)
        check_int("smem_row_bytes", self.smem_row_bytes, low=1)
        check_bool("swizzled", self.swizzled)
        check_bool("grouped", self.grouped)

    def grid(self, m: int, n: int) -> tuple[int, ...]:
        bm, bn, _ = self.tile
        return (m // bm * (n // bn),) if self.grouped else (n // bn, m // bm)


STEPS: dict[str, Bf16Step] = {s.name: s for s in (
    Bf16Step("wmma", "bf16_wmma", "tensor cores through WMMA fragments; rows padded to 80 bytes",
             (128, 128, 32), 256, 0, 80, False, False),
    Bf16Step("mma_ldmatrix", "bf16_mma_ldmatrix", "mma.sync.m16n8k16 fed by ldmatrix; 64-byte rows, unpadded",
             (128, 128, 32), 256, 0, 64, False, False),
    Bf16Step("pipeline", "bf16_pipeline", "cp.async 3-stage ring, XOR-swizzled 128-byte rows, 64 x 64 warp tiles",
             (128, 256, 64), 256, 3 * (128 + 256) * 64 * 2, 128, True, True),
    Bf16Step("wgmma", "bf16_wgmma", "Hopper TMA + mbarrier ring + wgmma.m64n256k16, producer/consumer warp groups",
             (128, 256, 64), 384, 4 * (128 + 256) * 64 * 2 + 1024 + 64, 128, True, True, arch="sm_90a"),
)}


def check_gemm_shapes(step: Bf16Step, m: int, n: int, k: int) -> None:
    """ValueError unless (m, n, k) are positive multiples of the step's block tile."""
    check_type("step", step, Bf16Step)
    for label, size, multiple in (("M", m, step.tile[0]), ("N", n, step.tile[1]), ("K", k, step.tile[2])):
        check_int(f"{label.lower()} ({label})", size, low=1)
        if size % multiple:
            raise ValueError(f"{label} must be a multiple of {multiple} for step {step.name!r} "
                             f"(block tile {step.tile}); got {size} (argument {label.lower()})")


def _step(step: str | Bf16Step) -> Bf16Step:
    check_type("step", step, (str, Bf16Step))
    return STEPS[check_choice("step", step, STEPS)] if isinstance(step, str) else step


def compiled_step(step: str | Bf16Step):
    """The compiled ``cupy.RawKernel`` of a step, with its dynamic shared memory limit raised (cached)."""
    step = _step(step)
    loader.require_gpu(f"BF16 GEMM step {step.name!r}")
    return _compiled(step)


@functools.lru_cache(maxsize=None)
def _compiled(step: Bf16Step):
    """The loader refuses a GPU without the step's instructions (``GPUTooOld``: wgmma needs exactly 9.0, the
    others 8.0), naming its compute capability, before anything is compiled."""
    try:
        fn = loader.kernel(SOURCE, step.function, arch=step.arch)
    except loader.GPUTooOld as exc:
        other = " The 'pipeline' step runs from compute capability 8.0 on." if step.arch == "sm_90a" else ""
        raise loader.GPUTooOld(f"BF16 GEMM step {step.name!r}: {exc}{other}") from None
    if step.dynamic_smem_bytes:
        fn.max_dynamic_shared_size_bytes = step.dynamic_smem_bytes
    return fn


# ----------------------------------------------------------------------------------------- launch
@functools.lru_cache(maxsize=256)
def _plan(name: str, a_layout: tuple, b_layout: tuple, out_layout: tuple | None) -> tuple:
    """Validate one (step, shapes, strides, item sizes) combination once; return what a launch needs: the
    :class:`~mlsys_lab.kernels.launch.PackedLaunch` (grid, block, shared memory and M, N, K packed) and the TMA
    box rows of A and B (None for the steps that load with ``cp.async``)."""
    step = STEPS[check_choice("step", name, STEPS)]
    loader.require_gpu(f"BF16 GEMM step {step.name!r}")
    a_shape, b_shape = a_layout[0], b_layout[0]
    if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[1]:
        raise ValueError(f"a must be (M, K) and b (N, K); got a {a_shape} and b {b_shape}")
    (m, k), n = a_shape, b_shape[0]
    check_gemm_shapes(step, m, n, k)
    for label, (shape, strides, size) in (("a", a_layout), ("b", b_layout), ("out", out_layout or a_layout)):
        if size != 2 or strides != (2 * shape[1], 2):
            raise ValueError(f"{label} must be a C-contiguous array of 2-byte bf16 bits; got item size {size}, "
                             f"strides {strides}")
    if out_layout is not None and out_layout[0] != (m, n):
        raise ValueError(f"out must be {(m, n)}; got {out_layout[0]}")
    tma_boxes = step.tile[:2] if step.arch == "sm_90a" else None
    launch = PackedLaunch(_compiled(step), step.grid(m, n), (step.threads,), step.dynamic_smem_bytes, 3,
                          (np.int32(m), np.int32(n), np.int32(k)))
    return launch, tma_boxes


def _layout(x) -> tuple:
    return x.shape, x.strides, x.dtype.itemsize


def bf16_gemm(a, b, step: str | Bf16Step = "pipeline", out=None):
    """C = A · Bᵀ with one step of the ladder, on the GPU (``GPUUnavailable`` on a CPU or a wrong GPU).

    ``a`` (M, K) and ``b`` (N, K) are C-contiguous 2-byte device arrays of bf16 bits (uint16 or a bfloat16
    dtype); ``out`` (M, N), reused when given, else allocated as uint16. Each (step, shapes, strides)
    combination is validated once and its launch plan cached (:mod:`mlsys_lab.kernels.launch`), so a repeated
    call costs a dictionary look-up and the driver's launch: the host work of a launcher is time the GPU sits
    idle when calls are timed one by one.
    """
    name = step.name if isinstance(step, Bf16Step) else step
    out_layout = None if out is None else _layout(out)
    launch, tma_boxes = _plan(name, _layout(a), _layout(b), out_layout)
    if out is None:
        out = backend.xp.empty((a.shape[0], b.shape[0]), dtype=backend.xp.uint16)
    if tma_boxes is None:
        launch(a, b, out)
    else:
        launch(tensor_map(a, tma_boxes[0]), tensor_map(b, tma_boxes[1]), out)
    return out


def blocks_per_sm(fn, threads: int, dynamic_smem_bytes: int) -> int:
    """Resident blocks of ``fn`` per SM: the driver's occupancy calculator, or the course's
    (:func:`mlsys_lab.occupancy.occupancy`, with this GPU's limits) when this CuPy does not expose it."""
    xp = backend.xp
    try:
        return int(xp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads,
                                                                            dynamic_smem_bytes))
    except Exception:  # the same rules, computed here
        attrs = fn.attributes
        return occupancy(max(int(attrs["num_regs"]), 1), threads, attrs["shared_size_bytes"] + dynamic_smem_bytes,
                         limits_of(xp.cuda.Device().attributes)).blocks_per_sm


def occupancy_record(fn, threads: int, dynamic_smem_bytes: int) -> dict:
    """Registers per thread, shared memory per block, local (spill) bytes, blocks per SM and the fraction
    of the SM's warp slots they fill."""
    attrs = fn.attributes
    blocks = blocks_per_sm(fn, threads, dynamic_smem_bytes)
    max_warps = backend.xp.cuda.Device().attributes["MaxThreadsPerMultiProcessor"] // 32
    return {"registers": attrs["num_regs"], "smem_bytes_per_block": attrs["shared_size_bytes"] + dynamic_smem_bytes,
            "local_bytes": attrs["local_size_bytes"], "blocks_per_sm": blocks,
            "occupancy": blocks * threads / 32 / max_warps}


def step_resources(step: str | Bf16Step) -> dict:
    """:func:`occupancy_record` of a compiled step (GPU only)."""
    step = _step(step)
    return occupancy_record(compiled_step(step), step.threads, step.dynamic_smem_bytes)


# --------------------------------------------------------------------- shared-memory bank model input
def ldmatrix_phase_words(step: str | Bf16Step) -> np.ndarray:
    """The 4-byte words one ldmatrix phase (8 rows x 16 bytes, one 8 x 8 matrix) reads, for every 16-byte
    chunk of a row: shape (chunks, 32). Feed to ``memory_hierarchy.bank_conflict_degree`` (1 = conflict-free).
    For ``wmma`` the hardware's fragment loads are assumed to read 8-row phases too; for ``wgmma`` the
    tensor cores read the same 128-byte-swizzled layout that TMA writes."""
    step = _step(step)
    chunks = step.tile[2] * 2 // 16
    rows = np.arange(8)
    phases = []
    for c in range(chunks):
        physical = c ^ (rows % 8) if step.swizzled else np.full(8, c)
        first_word = (rows * step.smem_row_bytes + physical * 16) // BANK_WORD_BYTES
        phases.append((first_word[:, None] + np.arange(4)).ravel())
    return np.array(phases)


def tile_store_words(step: str | Bf16Step) -> np.ndarray:
    """Words written by each quarter-warp phase (8 lanes x 16 bytes) of one tile copy into shared memory:
    thread t stores chunk t % (chunks per row) of row t // (chunks per row). Shape (phases, 32)."""
    step = _step(step)
    per_row = step.tile[2] * 2 // 16
    phases = []
    for first in range(0, 32, 8):
        t = np.arange(first, first + 8)
        rows, chunks = t // per_row, t % per_row
        physical = chunks ^ (rows % 8) if step.swizzled else chunks
        first_word = (rows * step.smem_row_bytes + physical * 16) // BANK_WORD_BYTES
        phases.append((first_word[:, None] + np.arange(4)).ravel())
    return np.array(phases)
