"""Lesson 11's kernels: the expert FFN as a loop, as grouped GEMMs, and as one grouped-GEMM launch.

* :mod:`.expert_ffn`: four ways to run the expert FFNs of a MoE layer: a loop over experts, grouped GEMMs as a
  schedule of cuBLAS calls, the same as one launch of ``grouped_gemm.cu``, and one padded batched GEMM.
* ``grouped_gemm.cu``: the tensor-core grouped-GEMM kernel (fp16 in, fp32 accumulate), one launch for all experts.
"""
