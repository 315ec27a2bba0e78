"""Does the Hopper attention backward compile for sm_90a only, size its shared memory as its tiles say, refuse bad
inputs by name, and give the dense float64 backward's dQ, dK, dV on fresh random inputs on an H100/H200?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention_hopper
from mlsys_lab.kernels.memory_hierarchy import flash_attention_hopper_backward as hopper_backward
from mlsys_lab.kernels.memory_hierarchy.flash_attention_backward import attention_backward_dense
from mlsys_lab.validation import relative_error

on_hopper = backend.on_gpu and backend.compute_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not on_hopper, reason="needs an H100/H200 (compute capability 9.0, sm_90a)")
RNG = np.random.default_rng()
ERROR_BOUND = 1e-2  # bf16 P, dS and outputs against float64: 2.3-2.6e-3 measured on the H200


def test_shared_memory_is_the_kept_tiles_the_ring_and_the_barriers():
    # d = 128, dK/dV: K and V (2 x 32 KiB) + 4 stages of Q_i, dO_i (4 x 32 KiB) + 4 x 512 B of L and D + 1 KiB + 9 bars
    assert hopper_backward.backward_smem_bytes("attention_backward_dkdv", 128) == 65536 + 131072 + 2048 + 1024 + 72
    # dQ keeps Q and dO and walks K_j, V_j: no vectors in the ring
    assert hopper_backward.backward_smem_bytes("attention_backward_dq", 128) == 65536 + 131072 + 1024 + 72
    assert hopper_backward.backward_smem_bytes("attention_backward_dq", 64, stages=2) == 32768 + 2 * 16384 + 1024 + 40
    for kernel in hopper_backward.KERNELS:
        for d in flash_attention_hopper.HEAD_DIMS:
            assert hopper_backward.backward_smem_bytes(kernel, d) <= 227 * 1024


def test_bad_settings_name_the_parameter():
    with pytest.raises(ValueError, match="head_dim"):
        hopper_backward.backward_stages(96)
    with pytest.raises(ValueError, match="kernel"):
        hopper_backward.backward_smem_bytes("attention_backward", 128)
    with pytest.raises(ValueError, match="stages"):
        hopper_backward.backward_smem_bytes("attention_backward_dq", 128, stages=0)


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_without_a_gpu_the_launcher_says_why():
    q = np.zeros((1, 1, 128, 128), np.uint16)
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        hopper_backward.flash_attention_hopper_backward(q, q, q, q, np.zeros((1, 1, 128), np.float32), q)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
def test_the_backward_holds_wgmma_only_for_sm90a(tmp_path):
    out = tmp_path / "k.ptx"
    for arch, has_wgmma in (("sm_90a", True), ("sm_90", False)):
        subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-DCAUSAL=1", "-o", str(out),
                        str(loader.source_path(hopper_backward.SOURCE))], check=True, capture_output=True)
        ptx = out.read_text()
        assert ("wgmma.mma_async.sync.aligned.m64n64k16" in ptx) is has_wgmma
        assert ("cp.async.bulk.shared::cluster.global" in ptx) is has_wgmma  # L and D by bulk copy
        assert ".entry attention_backward_prep" in ptx  # the row sums run anywhere


@needs_hopper
@pytest.mark.parametrize("head_dim", flash_attention_hopper.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_the_dense_float64_backward(head_dim, causal):
    xp = backend.xp
    for batch, heads, seq in ((1, 1, 128), (2, 3, 384), (1, 2, 640)):
        q, k, v, do = (bf16_gemm.to_bf16_bits(RNG.standard_normal((batch, heads, seq, head_dim), dtype=np.float32))
                       for _ in range(4))
        q_, k_, v_, do_ = (xp.asarray(x) for x in (q, k, v, do))
        o, lse = flash_attention_hopper.flash_attention_hopper(q_, k_, v_, causal)
        grads = hopper_backward.flash_attention_hopper_backward(q_, k_, v_, o, lse, do_, causal)
        want = attention_backward_dense(*(bf16_gemm.from_bf16_bits(x).astype(np.float64) for x in (q, k, v, do)),
                                        causal=causal)
        for name, got, ref in zip(("dQ", "dK", "dV"), grads, want, strict=True):
            error = relative_error(bf16_gemm.from_bf16_bits(backend.asnumpy(got)), ref)
            assert error < ERROR_BOUND, (name, (batch, heads, seq), error)


@needs_hopper
def test_refuses_a_log_sum_exp_of_the_wrong_shape():
    xp = backend.xp
    q = xp.zeros((1, 2, 128, 64), xp.uint16)
    with pytest.raises(ValueError, match="lse must be float32 of shape"):
        hopper_backward.flash_attention_hopper_backward(q, q, q, q, xp.zeros((1, 128), xp.float32), q)
