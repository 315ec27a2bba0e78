"""Does each lesson 04 check reject every plausible wrong answer, on every seed, and pass the reference?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises import memory_hierarchy as ex
from mlsys_lab.memory_hierarchy.warp_sim import transpose_naive_block

LANE = np.arange(32)


# ------------------------------------------------------------------------------------ sectors
def sectors_first_only(addresses, size):
    return len({int(a) // 32 for a in addresses})


def sectors_off_by_one(addresses, size):
    touched = set()
    for a in addresses:
        touched.update(range(int(a) // 32, (int(a) + size) // 32 + 1))
    return len(touched)


def sectors_not_deduplicated(addresses, size):
    return sum((int(a) + size - 1) // 32 - int(a) // 32 + 1 for a in addresses)


def sectors_span(addresses, size):
    return (int(max(addresses)) + size - 1) // 32 - int(min(addresses)) // 32 + 1


def sectors_128_byte_lines(addresses, size):
    touched = set()
    for a in addresses:
        touched.update(range(int(a) // 128, (int(a) + size - 1) // 128 + 1))
    return len(touched)


def sectors_from_useful_bytes(addresses, size):
    useful = {int(a) + i for a in addresses for i in range(size)}
    return -(-len(useful) // 32)


def sectors_visible_examples(addresses, size):
    a = np.asarray(addresses)
    if np.array_equal(a, LANE * 4):
        return 4
    if np.array_equal(a, LANE * 128):
        return 32
    if np.array_equal(a, LANE * 4 + 4):
        return 5
    return 32 * size // 4


# ------------------------------------------------------------------------------------ bank passes
def passes_no_broadcast(addresses, size):
    counts: dict[int, int] = {}
    for a in addresses:
        for w in range(int(a) // 4, int(a) // 4 + size // 4):
            counts[w % 32] = counts.get(w % 32, 0) + 1
    return max(counts.values())


def passes_wide_access_is_free(addresses, size):
    """Thinks a float4 spreads over 4 banks and so costs a quarter of the 4-byte count."""
    return -(-ex.reference_bank_passes(addresses, 4) // (size // 4))


def passes_byte_banks(addresses, size):
    per_bank: dict[int, set] = {}
    for a in addresses:
        per_bank.setdefault(int(a) % 32, set()).add(int(a))
    return max(len(v) for v in per_bank.values())


def passes_eight_byte_banks(addresses, size):
    per_bank: dict[int, set] = {}
    for a in addresses:
        for w in range(int(a) // 8, (int(a) + size - 1) // 8 + 1):
            per_bank.setdefault(w % 32, set()).add(w)
    return max(len(v) for v in per_bank.values())


def passes_bandwidth_only(addresses, size):
    words = {w for a in addresses for w in range(int(a) // 4, int(a) // 4 + size // 4)}
    return -(-len(words) // 32)


def passes_phases_only(addresses, size):
    """4-byte conflicts counted right, wider accesses charged one pass per phase (size / 4)."""
    return ex.reference_bank_passes(addresses, 4) if size == 4 else size // 4


def passes_gcd_of_stride(addresses, size):
    from math import gcd
    stride = (int(addresses[1]) - int(addresses[0])) // 4
    return 1 if stride == 0 else gcd(abs(stride), 32) * (size // 4)


# ------------------------------------------------------------------------------------ tiled matmul bytes
def tiled_forgot_c(m, n, k, t):
    return 4 * ((n // t) * m * k + (m // t) * k * n)


def tiled_in_elements(m, n, k, t):
    return (n // t) * m * k + (m // t) * k * n + m * n


def tiled_ignores_tile(m, n, k, t):
    return 4 * (2 * m * n * k + m * n)


def tiled_swapped_strips(m, n, k, t):
    return 4 * ((m // t) * m * k + (n // t) * k * n + m * n)


def tiled_a_read_once(m, n, k, t):
    return 4 * (m * k + (m // t) * k * n + m * n)


def tiled_c_read_and_written(m, n, k, t):
    return 4 * ((n // t) * m * k + (m // t) * k * n + 2 * m * n)


def tiled_tile_squared(m, n, k, t):
    return 4 * ((n // (t * t)) * m * k + (m // (t * t)) * k * n + m * n)


# ------------------------------------------------------------------------------------ kernels in the simulator
T = 32


def transpose_direct(bx, by, A, B, tile, n_rows, n_cols):
    """No tile: coalesced reads, writes n_rows floats apart (the naive kernel)."""
    transpose_naive_block(bx, by, A, B, tile, n_rows, n_cols)


def transpose_strided_reads(bx, by, A, B, tile, n_rows, n_cols):
    """No tile, lane = row of A: coalesced writes, strided reads."""
    lane = np.arange(T)
    for c in range(T):
        row, col = by * T + lane, bx * T + c
        B[col * n_rows + row] = A[row * n_cols + col]


def transpose_no_barrier(bx, by, A, B, tile, n_rows, n_cols):
    """Each warp-row stores its row and at once reads a column other rows have not stored yet."""
    lane = np.arange(T)
    for r in range(T):
        tile[r * T + lane] = A[(by * T + r) * n_cols + bx * T + lane]
        B[(bx * T + r) * n_rows + by * T + lane] = tile[lane * T + r]


def transpose_tile_not_transposed(bx, by, A, B, tile, n_rows, n_cols):
    """Reads the tile back along rows: B gets A's tile unflipped."""
    lane = np.arange(T)
    for r in range(T):
        tile[r * T + lane] = A[(by * T + r) * n_cols + bx * T + lane]
    for r in range(T):
        B[(bx * T + r) * n_rows + by * T + lane] = tile[r * T + lane]


def transpose_swapped_sizes(bx, by, A, B, tile, n_rows, n_cols):
    """n_rows and n_cols swapped (right only for square matrices)."""
    ex.reference_transpose_tiled(bx, by, A, B, tile, n_cols, n_rows) if n_rows != n_cols else \
        ex.reference_transpose_tiled(bx, by, A, B, tile, n_rows, n_cols)


def transpose_swapped_blocks(bx, by, A, B, tile, n_rows, n_cols):
    """bx taken as the block row (right only when the grid is square)."""
    ex.reference_transpose_tiled(by, bx, A, B, tile, n_rows, n_cols)


def transpose_in_locals(bx, by, A, B, tile, n_rows, n_cols):
    """Keeps the tile in Python variables, which no warp of a real block could share: no shared memory."""
    lane = np.arange(T)
    rows = [A[(by * T + r) * n_cols + bx * T + lane] for r in range(T)]
    block = np.array(rows)
    for r in range(T):
        B[(bx * T + r) * n_rows + by * T + lane] = block[:, r]


def transpose_one_lane_at_a_time(bx, by, A, B, tile, n_rows, n_cols):
    """The tile's mechanism, but one lane per request (a loop over threads): 32x the requests."""
    for r in range(T):
        for c in range(T):
            tile[r * T + c] = A[(by * T + r) * n_cols + bx * T + c]
    for r in range(T):
        for c in range(T):
            B[(bx * T + r) * n_rows + by * T + c] = tile[c * T + r]


def transpose_pad(pad):
    def kernel(bx, by, A, B, tile, n_rows, n_cols):
        lane, width = np.arange(T), T + pad
        for r in range(T):
            tile[r * width + lane] = A[(by * T + r) * n_cols + bx * T + lane]
        for r in range(T):
            B[(bx * T + r) * n_rows + by * T + lane] = tile[lane * width + r]
    return kernel


def transpose_skewed_by_two(bx, by, A, B, tile, n_rows, n_cols):
    """Row r rotated by 2r words: a column's 32 words land in 16 banks (2-way conflicts), result right."""
    lane = np.arange(T)
    for r in range(T):
        tile[r * T + (lane + 2 * r) % T] = A[(by * T + r) * n_cols + bx * T + lane]
    for r in range(T):
        B[(bx * T + r) * n_rows + by * T + lane] = tile[lane * T + (r + 2 * lane) % T]


def transpose_padded_no_barrier(bx, by, A, B, tile, n_rows, n_cols):
    lane = np.arange(T)
    for r in range(T):
        tile[r * 33 + lane] = A[(by * T + r) * n_cols + bx * T + lane]
        B[(bx * T + r) * n_rows + by * T + lane] = tile[lane * 33 + r]


def transpose_padded_in_locals(bx, by, A, B, tile, n_rows, n_cols):
    transpose_in_locals(bx, by, A, B, tile, n_rows, n_cols)


def transpose_padded_stored_as_columns(bx, by, A, B, tile, n_rows, n_cols):
    """Flips on the way in (tile[lane][r], 32-way) and reads rows out: the conflict moved, not removed."""
    lane = np.arange(T)
    for r in range(T):
        tile[lane * T + r] = A[(by * T + r) * n_cols + bx * T + lane]
    for r in range(T):
        B[(bx * T + r) * n_rows + by * T + lane] = tile[r * T + lane]


B_ELEMS = ex.BLOCK_ELEMENTS


def _stage(bx, x, partial):
    lane = np.arange(32)
    for w in range(B_ELEMS // 32):
        t = w * 32 + lane
        partial[t] = x[bx * B_ELEMS + t]


def sum_interleaved(bx, x, out, partial):
    """Interleaved addressing (index = 2 s t): 2-, 4-, 8-... way conflicts."""
    _stage(bx, x, partial)
    lane, s = np.arange(32), 1
    while s < B_ELEMS:
        active = B_ELEMS // (2 * s)
        for w in range(0, active, 32):
            t = w + lane[: min(32, active - w)]
            i = 2 * s * t
            partial[i] = partial[i] + partial[i + s]
        s *= 2
    out[bx] = partial[0]


def sum_divergent(bx, x, out, partial):
    """if (t % (2 s) == 0): every warp issues requests at every level, with few lanes active."""
    _stage(bx, x, partial)
    lane, s = np.arange(32), 1
    while s < B_ELEMS:
        for w in range(B_ELEMS // 32):
            t = w * 32 + lane
            t = t[t % (2 * s) == 0]
            if t.size:
                partial[t] = partial[t] + partial[t + s]
        s *= 2
    out[bx] = partial[0]


def sum_stops_early(bx, x, out, partial):
    """The tree loop stops at s = 2: the last addition is missing."""
    _stage(bx, x, partial)
    lane, s = np.arange(32), B_ELEMS // 2
    while s >= 2:
        for w in range(0, s, 32):
            t = w + lane[: min(32, s - w)]
            partial[t] = partial[t] + partial[t + s]
        s //= 2
    out[bx] = partial[0]


def sum_serial(bx, x, out, partial):
    """Thread 0 adds the 256 staged values one by one: one lane per request."""
    _stage(bx, x, partial)
    total = 0.0
    for i in range(B_ELEMS):
        total += partial[i]
    out[bx] = total


def sum_strided_load(bx, x, out, partial):
    """Thread t loads x[8 (t % 32) + t // 32]: lanes 8 floats apart (uncoalesced)."""
    lane = np.arange(32)
    for w in range(B_ELEMS // 32):
        t = w * 32 + lane
        partial[t] = x[bx * B_ELEMS + 8 * lane + w]
    _tree(bx, out, partial)


def _tree(bx, out, partial):
    lane, s = np.arange(32), B_ELEMS // 2
    while s >= 1:
        for w in range(0, s, 32):
            t = w + lane[: min(32, s - w)]
            partial[t] = partial[t] + partial[t + s]
        s //= 2
    out[bx] = partial[0]


def sum_in_locals(bx, x, out, partial):
    """Sums the loaded values in Python, which threads of a block cannot do without shared memory."""
    lane = np.arange(32)
    total = 0.0
    for w in range(B_ELEMS // 32):
        total += float(np.sum(x[bx * B_ELEMS + w * 32 + lane]))
    out[bx] = total


def sum_ignores_block(bx, x, out, partial):
    """Always sums block 0's elements."""
    _stage(0, x, partial)
    _tree(bx, out, partial)


def sum_no_barrier(bx, x, out, partial):
    """Each warp stores its values and starts the tree before the other warps have stored theirs."""
    lane = np.arange(32)
    for w in range(B_ELEMS // 32):
        t = w * 32 + lane
        partial[t] = x[bx * B_ELEMS + t]
        if w == 0:
            partial[lane] = partial[lane] + partial[lane + 128]
    _tree(bx, out, partial)


CATALOGUES = [
    Catalogue("sectors", ex.check_sectors, ex.reference_sectors, {
        "first sector only (no straddling)": sectors_first_only,
        "last sector off by one": sectors_off_by_one,
        "sectors per lane summed, not deduplicated": sectors_not_deduplicated,
        "span from lowest to highest sector": sectors_span,
        "128-byte lines instead of sectors": sectors_128_byte_lines,
        "useful bytes / 32 (assumes perfect alignment)": sectors_from_useful_bytes,
        "visible examples special-cased": sectors_visible_examples,
    }),
    Catalogue("bank_passes", ex.check_bank_passes, ex.reference_bank_passes, {
        "no broadcast (counts lanes, not words)": passes_no_broadcast,
        "wide accesses divide the passes by size/4": passes_wide_access_is_free,
        "bank from the byte address (forgets the 4-byte word)": passes_byte_banks,
        "8-byte banks": passes_eight_byte_banks,
        "distinct words / 32 (bandwidth only, no conflicts)": passes_bandwidth_only,
        "wide accesses charged size/4, conflicts ignored": passes_phases_only,
        "gcd of the first stride (assumes a strided pattern)": passes_gcd_of_stride,
    }),
    Catalogue("tiled_matmul_bytes", ex.check_tiled_matmul_bytes, ex.reference_tiled_matmul_bytes, {
        "forgets writing C": tiled_forgot_c,
        "elements, not bytes": tiled_in_elements,
        "tile ignored (no reuse)": tiled_ignores_tile,
        "A and B strips swapped": tiled_swapped_strips,
        "A read only once": tiled_a_read_once,
        "C read and written": tiled_c_read_and_written,
        "divides by tile squared": tiled_tile_squared,
    }),
    Catalogue("transpose_tiled", ex.check_transpose_tiled, ex.reference_transpose_tiled, {
        "no tile: strided writes (the naive kernel)": transpose_direct,
        "no tile: strided reads": transpose_strided_reads,
        "no barrier between storing and loading the tile": transpose_no_barrier,
        "tile read back along rows (not transposed)": transpose_tile_not_transposed,
        "n_rows and n_cols swapped": transpose_swapped_sizes,
        "bx and by swapped": transpose_swapped_blocks,
        "tile kept in Python variables (no shared memory)": transpose_in_locals,
        "one lane per request": transpose_one_lane_at_a_time,
    }),
    Catalogue("transpose_padded", ex.check_transpose_padded, ex.reference_transpose_padded, {
        "unpadded tile (32-way conflicts)": transpose_pad(0),
        "rows rotated by 2 words (2-way conflicts)": transpose_skewed_by_two,
        "no barrier between storing and loading the tile": transpose_padded_no_barrier,
        "tile kept in Python variables (no shared memory)": transpose_padded_in_locals,
        "conflict moved to the stores": transpose_padded_stored_as_columns,
        "no tile: strided writes (the naive kernel)": transpose_direct,
    }),
    Catalogue("block_sum", ex.check_block_sum, ex.reference_block_sum, {
        "interleaved addressing (bank conflicts)": sum_interleaved,
        "divergent t % 2s (every warp at every level)": sum_divergent,
        "tree stops at s = 2": sum_stops_early,
        "thread 0 adds serially": sum_serial,
        "strided loads of x": sum_strided_load,
        "sums in Python variables (no shared memory)": sum_in_locals,
        "ignores the block index": sum_ignores_block,
        "tree starts before every warp has stored": sum_no_barrier,
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
