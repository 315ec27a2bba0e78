"""The configuration spaces the lesson searches: the recorded GPU tuning run of ``matmul_tunable`` joined with
the static features of the same configurations, a CPU family measured here, and how rugged a space is.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from mlsys_lab import records
from mlsys_lab.autotuning.features import STATIC_FEATURES
from mlsys_lab.autotuning.stats import standardize
from mlsys_lab.validation import check_array, check_int

RAW_PARAMETERS = ("BM", "BN", "BK", "TM", "TN", "UNROLL", "VEC", "PIPE")


def load_gpu_space(measured_file: str = "autotune_gpu.json",
                   static_file: str = "autotune_static_features.json") -> dict:
    """The GPU tuning run joined with the static features of the same configurations.

    Returns ``{"raw": (n, 8) parameters, "static": (n, 14) counts, "seconds": (n,), "configs": [...],
    "meta": {...}}``: rows are the configurations both files hold, in the order they were measured.
    """
    records.check_name("measured_file", measured_file)
    records.check_name("static_file", static_file)
    measured, static = records.load(measured_file), records.load(static_file)
    features_of = {tuple(row["config"][p] for p in RAW_PARAMETERS): row["features"]
                   for row in static["configs"]}
    rows = [r for r in measured["measured"] if "median_s" in r
            and tuple(r["config"][p] for p in RAW_PARAMETERS) in features_of]
    keys = [tuple(r["config"][p] for p in RAW_PARAMETERS) for r in rows]
    meta = {k: v for k, v in measured.items() if k != "measured"}
    meta["toolchain"] = static["toolchain"]
    return {"raw": np.array(keys, dtype=float),
            "static": np.array([[features_of[k][f] for f in STATIC_FEATURES] for k in keys], dtype=float),
            "seconds": np.array([r["median_s"] for r in rows]),
            "gpu_registers": np.array([r["registers"] for r in rows]),
            "configs": [r["config"] for r in rows], "meta": meta}


@functools.lru_cache(maxsize=1)
def recorded_space() -> dict:
    """:func:`load_gpu_space` with both feature sets standardized for the surrogate: ``raw_std`` (log2 of the
    parameters) and ``static_std`` (log1p of the counts). Cached: treat it as read-only."""
    space = load_gpu_space()
    space["raw_std"] = standardize(np.log2(space["raw"] + 1))
    space["static_std"] = standardize(space["static"], log=True)
    return space


def neighbour_jumps(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Ruggedness: |log(t_a / t_b)| over pairs of configs that differ in exactly one parameter."""
    features = np.asarray(check_array("features", features, ndim=2))
    seconds = check_array("seconds", seconds, ndim=1, finite=True)
    if len(seconds) != len(features):
        raise ValueError(f"seconds must hold one time per row of features ({len(features)}); got {len(seconds)}")
    if (seconds <= 0).any() or len(features) > 2**13:  # (n, n, d) pairwise comparison below
        raise ValueError(f"seconds must be run times > 0 of at most 2**13 configs (rows of features); "
                         f"got {len(seconds)}, min {seconds.min():g}")
    log_t = np.log(np.asarray(seconds, dtype=float))
    differ = (features[:, None, :] != features[None, :, :]).sum(-1)
    a, b = np.nonzero(np.triu(differ == 1))
    return np.abs(log_t[a] - log_t[b])


def measure_cpu_tiles(n: int = 192, tiles: tuple[int, ...] = (4, 8, 16, 32, 64, 128), repeat: int = 3,
                      progress: bool = True) -> dict:
    """Time the numba tiled matmul (ikj, tile_i x tile_k x tile_j) over every tile triple: the CPU family.

    Returns ``{"raw": (n_configs, 3) tiles, "seconds": (n_configs,)}``; medians of ``repeat`` runs.
    """
    from tqdm.auto import tqdm

    from mlsys_lab.loops.matmul import matmul_tiled
    from mlsys_lab.timing import benchmark

    n = check_int("n", n, low=8, high=2048)
    rng = np.random.default_rng(0)
    a, b, out = rng.standard_normal((n, n)), rng.standard_normal((n, n)), np.empty((n, n))
    configs = list(itertools.product(tiles, repeat=3))
    seconds = [benchmark(lambda c=c: matmul_tiled(a, b, out, *c), warmup=1, repeat=repeat).median
               for c in tqdm(configs, desc="tile configs", disable=not progress)]
    return {"raw": np.array(configs, dtype=float), "seconds": np.array(seconds)}
