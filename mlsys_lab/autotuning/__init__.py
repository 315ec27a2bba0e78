"""Lesson 05, autotuning: searching kernel configurations (grid, random, model-guided) on recorded measurements.

* :mod:`.space`: the recorded GPU tuning run joined with its static features, a CPU tile family measured
  here, and how rugged a space is (run-time jumps between neighbouring configurations);
* :mod:`.features`: static features of a compiled kernel: PTX instructions by class, ``ptxas -v`` resources;
* :mod:`.stats`: ranks, Spearman's rank correlation, feature standardization;
* :mod:`.surrogate`: a Gaussian-process model of log run time, and its held-out predictions;
* :mod:`.search`: grid, random and model-guided search replayed on a measured table, and their sample
  efficiency (best found after t measurements, over seeds).

The tunable kernel and its space of configurations are lesson 02's
(:mod:`mlsys_lab.kernels.loops.launchers`: ``TunableConfig``, ``tunable_space``, ``matmul_tunable``).
"""

from mlsys_lab.autotuning.features import (
    INSTRUCTION_CLASSES,
    STATIC_FEATURES,
    compile_static_features,
    count_ptx_instructions,
    ptxas_resources,
)
from mlsys_lab.autotuning.search import (
    STRATEGIES,
    evaluations_to_reach,
    factorial_grid,
    grid_search,
    model_guided_search,
    random_search,
    search_curves,
    strategy_curves,
)
from mlsys_lab.autotuning.space import (
    RAW_PARAMETERS,
    load_gpu_space,
    measure_cpu_tiles,
    neighbour_jumps,
    recorded_space,
)
from mlsys_lab.autotuning.stats import ranks, spearman, standardize
from mlsys_lab.autotuning.surrogate import cross_validated_predictions, gp_posterior

__all__ = [
    "RAW_PARAMETERS", "load_gpu_space", "recorded_space", "measure_cpu_tiles", "neighbour_jumps",
    "INSTRUCTION_CLASSES", "STATIC_FEATURES", "count_ptx_instructions", "ptxas_resources", "compile_static_features",
    "ranks", "spearman", "standardize",
    "gp_posterior", "cross_validated_predictions",
    "factorial_grid", "grid_search", "random_search", "model_guided_search",
    "search_curves", "evaluations_to_reach", "STRATEGIES",
    "strategy_curves",
]
