"""Autotuning: search a kernel's configuration space, and ask which coordinates make the search easy.

A configuration space is a finite table: ``features`` (n_configs, d) describing each configuration and
``seconds`` (n_configs,) its measured run time. Searches here replay a measured table, so a strategy's
*sample efficiency* (best time found after t measurements, over many seeds) costs no GPU time.

* strategies: :func:`grid_search`, :func:`random_search`, :func:`model_guided_search` (a Gaussian-process
  surrogate with a lower-confidence-bound pick, as in Bayesian optimisation; Snoek et al. 2012);
* :func:`search_curves`: best-found/optimum after each evaluation, one row per seed;
* the *static instruction-count space*: :func:`count_ptx_instructions` and :func:`ptxas_resources`
  turn a compiled configuration into counts of loads, stores, FMAs, shared-memory ops, branches, spills;
  :func:`cross_validated_predictions` and :func:`spearman` measure how well a feature space predicts time.

Shapes: features (n_configs, d); seconds (n_configs,); curves (n_seeds, budget).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Callable

import numpy as np

from mlsys_lab.validation import check_int, check_positive

# PTX opcode prefixes grouped into classes (PTX ISA 8.x). v4 loads count as one instruction.
INSTRUCTION_CLASSES: dict[str, tuple[str, ...]] = {
    "global_loads": ("ld.global",),
    "global_stores": ("st.global",),
    "shared_loads": ("ld.shared",),
    "shared_stores": ("st.shared",),
    "fma": ("fma.rn.f32",),
    "barriers": ("bar.sync", "barrier.sync"),
    "branches": ("bra",),
    "predicates": ("setp",),
    "integer": ("add.s32", "add.s64", "add.u32", "add.u64", "mul.lo", "mul.wide", "mad.lo", "shl.", "shr.",
                "and.b", "or.b", "sub.s"),
    "moves": ("mov.", "cvta", "cvt."),
}


def entry_body(ptx: str, entry: str) -> str:
    """The PTX text of one kernel (``.entry <name>(`` up to the next ``.entry``); ValueError if absent."""
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(", ptx)
    if match is None:
        raise ValueError(f"entry must name a kernel in the PTX; {entry!r} is not there")
    following = ptx.find(".entry", match.end())
    return ptx[match.start(): following if following >= 0 else len(ptx)]


def count_ptx_instructions(ptx: str, entry: str | None = None) -> dict[str, int]:
    """Static count of PTX instructions by class (see ``INSTRUCTION_CLASSES``), plus ``total``.

    Counts each instruction line of the text once, however often it runs: a *static* count.
    ``entry`` restricts the count to one kernel of the module.
    """
    if entry is not None:
        ptx = entry_body(ptx, entry)
    counts = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    total = 0
    for line in ptx.splitlines():
        text = line.strip()
        if not text or text.startswith(("//", ".", "{", "}", "(", ")", "$")) or text.endswith(":"):
            continue
        opcode = text.split()[0]
        if opcode.startswith("@"):  # predicated: "@%p1 bra $L__BB0_2;"
            parts = text.split()
            opcode = parts[1] if len(parts) > 1 else ""
        total += 1
        for name, prefixes in INSTRUCTION_CLASSES.items():
            if opcode.startswith(prefixes):
                counts[name] += 1
                break
    counts["total"] = total
    return counts


def ptxas_resources(log: str, entry: str | None = None) -> dict[str, int]:
    """Registers, spill bytes and shared memory from ``ptxas -v`` output, for kernel ``entry``.

    Without ``entry`` the last function listed is read.
    """
    if entry is not None:
        start = log.find(f"Compiling entry function '{entry}'")
        if start < 0:
            raise ValueError(f"entry must name a kernel in the ptxas log; {entry!r} is not there")
        following = log.find("Compiling entry function", start + 1)
        log = log[start: following if following >= 0 else len(log)]
    def last_int(pattern: str) -> int:
        found = re.findall(pattern, log)
        return int(found[-1]) if found else 0
    return {"registers": last_int(r"Used (\d+) registers"),
            "spill_store_bytes": last_int(r"(\d+) bytes spill stores"),
            "spill_load_bytes": last_int(r"(\d+) bytes spill loads"),
            "shared_bytes": last_int(r"(\d+) bytes smem")}


def compile_static_features(source_path: str, defines: dict[str, int], entry: str = "matmul_tunable",
                            arch: str = "sm_90") -> dict[str, int]:
    """Compile ``source_path`` with ``nvcc --ptx`` and ``ptxas -v``; the static features of kernel ``entry``.

    Needs ``nvcc`` and ``ptxas`` on PATH (the CUDA toolkit); raises RuntimeError saying so otherwise.
    """
    if not (shutil.which("nvcc") and shutil.which("ptxas")):
        raise RuntimeError("nvcc and ptxas are needed for static features: install the CUDA toolkit, "
                           "or use the features recorded in mlsys_lab/data/autotune_gpu.json")
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    ptx = subprocess.run(["nvcc", f"-arch={arch}", "-std=c++17", "--ptx", *flags, source_path, "-o", "-"],
                         check=True, capture_output=True, text=True).stdout
    log = subprocess.run(["ptxas", f"-arch={arch}", "-v", "-o", "/dev/null", "-"], input=ptx,
                         check=True, capture_output=True, text=True).stderr
    return {**count_ptx_instructions(ptx, entry), **ptxas_resources(log, entry)}


# --- statistics --------------------------------------------------------------------------------------
def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank (as in Spearman's definition)."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranked)
    return (sums / counts)[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation: the Pearson correlation of the ranks (1 = same order, -1 = reversed)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must be 1-D of equal length >= 2; got {x.shape} and {y.shape}")
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def standardize(features: np.ndarray, log: bool = False) -> np.ndarray:
    """Columns to zero mean, unit spread (constant columns to 0); ``log`` takes log1p first (counts)."""
    x = np.asarray(features, dtype=float)
    if log:
        x = np.log1p(np.maximum(x, 0))
    spread = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(spread > 0, spread, 1.0)


# --- a Gaussian-process surrogate ----------------------------------------------------------------------
def gp_posterior(x_train: np.ndarray, y_train: np.ndarray, x_query: np.ndarray,
                 length_scale: float | None = None, noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of a GP with an RBF kernel (Rasmussen & Williams 2006, alg. 2.1).

    k(a, b) = exp(-|a - b|² / (2 l²)); ``y_train`` is standardized inside; l defaults to sqrt(d).
    """
    x_train, x_query = np.atleast_2d(x_train), np.atleast_2d(x_query)
    length_scale = np.sqrt(x_train.shape[1]) if length_scale is None else check_positive("length_scale",
                                                                                          length_scale)
    mean, scale = y_train.mean(), y_train.std() or 1.0
    target = (y_train - mean) / scale

    def kernel(a, b):
        squared = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-squared / (2 * length_scale**2))

    gram = kernel(x_train, x_train) + noise * np.eye(len(x_train))
    chol = np.linalg.cholesky(gram)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, target))
    cross = kernel(x_query, x_train)
    v = np.linalg.solve(chol, cross.T)
    variance = np.clip(1.0 - (v**2).sum(0), 1e-12, None)
    return mean + scale * (cross @ alpha), scale * np.sqrt(variance)


def cross_validated_predictions(features: np.ndarray, seconds: np.ndarray, folds: int = 5, seed: int = 0,
                                **gp_options) -> np.ndarray:
    """Held-out predictions of log(seconds): each config predicted by a GP fit on the other folds."""
    folds = check_int("folds", folds, low=2, high=len(seconds))
    target = np.log(np.asarray(seconds, dtype=float))
    assignment = np.random.default_rng(seed).permutation(len(target)) % folds
    predicted = np.empty_like(target)
    for fold in range(folds):
        held = assignment == fold
        predicted[held], _ = gp_posterior(features[~held], target[~held], features[held], **gp_options)
    return np.exp(predicted)


# --- search strategies over a measured table ------------------------------------------------------------
Strategy = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]


def grid_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    """A regular sweep: every (n / budget)-th config in table order, starting at a seed-chosen offset."""
    n = len(seconds)
    budget = check_int("budget", budget, low=1, high=n)
    stride = n / budget
    offset = np.random.default_rng(seed).uniform(0, stride)
    return (np.floor(offset + stride * np.arange(budget)).astype(int)) % n


def random_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    """``budget`` distinct configs drawn uniformly at random."""
    budget = check_int("budget", budget, low=1, high=len(seconds))
    return np.random.default_rng(seed).permutation(len(seconds))[:budget]


def model_guided_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0,
                        n_initial: int = 8, kappa: float = 1.0) -> np.ndarray:
    """Start with ``n_initial`` random configs, then measure argmin of the GP's (mean - kappa * std).

    Works on log(seconds); ``features`` should be standardized. Only measured configs' times are used.
    """
    n = len(seconds)
    budget = check_int("budget", budget, low=1, high=n)
    order = list(np.random.default_rng(seed).permutation(n)[:min(n_initial, budget)])
    log_seconds = np.log(np.asarray(seconds, dtype=float))
    while len(order) < budget:
        mean, std = gp_posterior(features[order], log_seconds[order], features)
        score = mean - kappa * std
        score[order] = np.inf
        order.append(int(np.argmin(score)))
    return np.asarray(order)


def search_curves(strategy: Strategy, features: np.ndarray, seconds: np.ndarray, budget: int,
                  seeds: int = 20) -> np.ndarray:
    """Best-found time / true best after each evaluation: shape (seeds, budget); 1.0 = found the optimum."""
    seconds = np.asarray(seconds, dtype=float)
    rows = []
    for seed in range(check_int("seeds", seeds, low=1)):
        picked = strategy(features, seconds, budget, seed)
        rows.append(np.minimum.accumulate(seconds[picked]) / seconds.min())
    return np.vstack(rows)


def evaluations_to_reach(curves: np.ndarray, within: float = 1.05) -> np.ndarray:
    """Per seed: evaluations needed to find a config within ``within`` x the best (budget + 1 = never)."""
    hit = curves <= within
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, curves.shape[1] + 1)


def neighbour_jumps(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Ruggedness: |log(t_a / t_b)| over pairs of configs that differ in exactly one parameter."""
    features = np.asarray(features)
    log_t = np.log(np.asarray(seconds, dtype=float))
    differ = (features[:, None, :] != features[None, :, :]).sum(-1)
    a, b = np.nonzero(np.triu(differ == 1))
    return np.abs(log_t[a] - log_t[b])


# --- recorded spaces --------------------------------------------------------------------------------------
RAW_PARAMETERS = ("BM", "BN", "BK", "TM", "TN", "UNROLL", "VEC", "PIPE")
STATIC_FEATURES = ("global_loads", "global_stores", "shared_loads", "shared_stores", "fma", "barriers",
                   "branches", "predicates", "integer", "moves", "total", "registers", "spill_store_bytes",
                   "spill_load_bytes")


def load_gpu_space(measured_file: str = "autotune_gpu.json",
                   static_file: str = "autotune_static_features.json") -> dict:
    """The GPU tuning run joined with the static features of the same configurations.

    Returns ``{"raw": (n, 8) parameters, "static": (n, 14) counts, "seconds": (n,), "configs": [...],
    "meta": {...}}``: rows are the configurations both files hold, in the order they were measured.
    """
    from mlsys_lab import records

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


def measure_cpu_tiles(n: int = 192, tiles: tuple[int, ...] = (4, 8, 16, 32, 64, 128), repeat: int = 3,
                      progress: bool = True) -> dict:
    """Time the numba tiled matmul (ikj, tile_i x tile_k x tile_j) over every tile triple: the CPU family.

    Returns ``{"raw": (n_configs, 3) tiles, "seconds": (n_configs,)}``; medians of ``repeat`` runs.
    """
    import itertools

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
