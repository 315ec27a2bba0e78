"""Lesson 11's kernels: the expert FFN as a loop, as grouped GEMMs, and as one grouped-GEMM launch; the token
permutation around it.

* :mod:`.expert_ffn`: four ways to run the expert FFNs of a MoE layer: a loop over experts, grouped GEMMs as a
  schedule of cuBLAS calls, the same as one launch of ``grouped_gemm.cu``, and one padded batched GEMM.
* ``grouped_gemm.cu``: the tensor-core grouped-GEMM kernel (fp16 in, fp32 accumulate), one launch for all experts.
* :mod:`.permute`: the token permutation as data movement, tokens scattered into per-expert buffers by the router's
  (expert, slot) and gathered back weighted by the gates (``moe_permute``, ``moe_unpermute``), with NumPy references.
* ``permute.cu``: its kernels, a block per (token, choice) pair for the scatter and a block per token for the gather
  (no atomics), and the slow lookalikes the CUDA exercises' checks name.
"""
