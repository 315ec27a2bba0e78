"""Lesson 04's kernels: one module per memory space, the fused kernels, and the SGEMM ladder.

* :mod:`.global_memory`: the course's copy, strided reads, an L2-resident buffer read many times (``global.cu``);
* :mod:`.shared_memory`: tiled transposes with and without padding, strided bank reads (``shared.cu``);
* :mod:`.constant_memory`: broadcast vs serialized reads of ``__constant__`` coefficients (``constant.cu``);
* :mod:`.local_memory`: register pressure and spills, and the ``ptxas -v`` report (``local.cu``);
* :mod:`.fused`: one-pass row softmax, a fused SiLU chain, a two-stage sum at copy bandwidth (``fused.cu``);
* :mod:`.sgemm`: the SGEMM progression, C = A @ B in FP32, naive to warp-tiled (``sgemm.cu``);
* :mod:`.bf16_gemm`: the tensor-core ladder, C = A · Bᵀ in BF16, WMMA to Hopper wgmma + TMA (``bf16_gemm.cu``);
* :mod:`.flash_attention`: a fused attention forward on tensor cores, FlashAttention-2 (``flash_attention.cu``);
* :mod:`.flash_attention_backward`: the tiled backward of FlashAttention-2 (Algorithm 2) in NumPy, the reference the
  fused backward is checked against, and its FLOP and byte counts;
* :mod:`.flash_attention_hopper`: the attention forward on Hopper, FlashAttention-3's way: TMA, warp specialization,
  wgmma, ping-pong (``flash_attention_hopper.cu``, sm_90a);
* :mod:`.flash_attention_hopper_backward`: its backward, dQ, dK, dV on the same machinery
  (``flash_attention_hopper_backward.cu``, sm_90a);
* :mod:`.fp8_block_gemm`: DeepSeek-V3's FP8 GEMM with 1 x 128 and 128 x 128 scales, promoted in fp32 every 128 of K
  (``fp8_block_gemm.cu``, sm_90a). ``hopper_ptx.cuh`` holds the three's mbarrier, TMA and wgmma building blocks.

Every launcher takes and returns device arrays and raises :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a
CPU; every NumPy reference beside it takes and returns NumPy arrays. The warp-level model that predicts what
these kernels cost is :mod:`mlsys_lab.memory_hierarchy.simt`.
"""

THREADS = 256  # threads per block of the lesson's one-dimensional launches
