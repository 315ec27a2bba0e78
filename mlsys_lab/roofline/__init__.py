"""Lesson 03, the roofline: ceilings of a machine, operators placed under them, Little's law.

* :mod:`.model`: the roofline P = min(peak, I x bandwidth), its ridge point, hierarchical roofs, and an
  operator (a lesson-01 cost) placed under a machine's roof;
* :mod:`.littles_law`: n = R x t, work in flight against throughput, and the recorded GPU sweeps;
* :mod:`.measured`: the course's kernels measured on the H200 beside their roofline times;
* :mod:`.ceilings`: this machine's memory ceiling, from a read-only stream.

The operator costs the lesson places (``matmul_cost``, ``softmax_cost``, ``bound``, ...) are lesson 01's:
``from mlsys_lab.operators import matmul_cost``. The Little's-law launchers are in
:mod:`mlsys_lab.kernels.roofline.littles_law`.
"""

from mlsys_lab.roofline.ceilings import read_bandwidth
from mlsys_lab.roofline.littles_law import (
    LittleSweep,
    inflight_required,
    littles_law_sweeps,
    loaded_latency,
    throughput_with_inflight,
)
from mlsys_lab.roofline.measured import MeasuredKernel, measured_hardware, measured_kernels
from mlsys_lab.roofline.model import (
    OPERATORS,
    RooflinePoint,
    attainable_flops,
    hierarchical_attainable,
    operator_cost,
    place,
    ridge_point,
    roofline_curve,
)

__all__ = [
    "attainable_flops", "ridge_point", "hierarchical_attainable", "roofline_curve",
    "OPERATORS", "operator_cost", "RooflinePoint", "place",
    "inflight_required", "throughput_with_inflight", "loaded_latency", "LittleSweep", "littles_law_sweeps",
    "MeasuredKernel", "measured_hardware", "measured_kernels", "read_bandwidth",
]
