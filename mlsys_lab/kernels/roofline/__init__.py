"""Lesson 03's kernels: the Little's-law microbenchmarks, and a full reduction near the memory roof.

* :mod:`.littles_law`: launchers for ``roofline/littles_law.cu``: a pointer chase (latency of one load), loads
  in flight against bandwidth, and chains of FP32 FMAs and tensor-core MMAs in flight against throughput, each
  with its NumPy reference. The law itself is :mod:`mlsys_lab.roofline.littles_law`.
* :mod:`.reduce`: sum(x) of float32 in one kernel, warp shuffles and one atomicAdd per block (``reduce.cu``),
  the reference of the lesson's CUDA exercise, with its NumPy reference.
"""
