"""Lesson 11's kernels: the expert FFN as a loop, as grouped GEMMs, and as one grouped-GEMM launch.

* :mod:`.expert_ffn`: Four ways to run the expert FFNs of a MoE layer: a loop over experts, grouped GEMMs as a
  schedule of
"""
