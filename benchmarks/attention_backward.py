"""Check and time the Hopper attention backward beside cuDNN's and FlashAttention-2's (PyTorch SDPA backends).

    PYTHONPATH=$PWD python3 benchmarks/attention_backward.py [--out DIR] [--quick]

Run alone it prints its checks and timings; ``benchmarks/hopper_kernels.py`` runs it too and stores the results
beside the forward's and the FP8 GEMM's, so that the three ratios come from one run. The check: dQ, dK and dV of
fresh random inputs (O and the log-sum-exp from the course's forward) against the float64 NumPy backward that
materialises P (:func:`~mlsys_lab.kernels.memory_hierarchy.flash_attention_backward.attention_backward_dense`), by
relative error. The timing: CUDA events after warm-up, interleaved rounds, median; FLOPs counted as the
FlashAttention papers count them (2.5x the forward). PyTorch is a benchmark comparison only.
"""

from __future__ import annotations

import argparse
import functools
import json
import traceback
from pathlib import Path

import numpy as np

from benchmarks.tensor_cores import random_bf16
from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention_hopper
from mlsys_lab.kernels.memory_hierarchy import flash_attention_hopper_backward as hopper_backward
from mlsys_lab.kernels.memory_hierarchy.flash_attention_backward import (
    attention_backward_dense,
    attention_backward_flop,
)
from mlsys_lab.validation import relative_error

BACKWARD_ERROR_BOUND = 2e-2  # bf16 P and dS, bf16 outputs, against float64


def backward_check(d: int, causal: bool, shape=(2, 3, 384)) -> dict:
    """Relative errors of dQ, dK, dV on fresh random inputs (dO scaled like a loss gradient)."""
    q, k, v, do = (random_bf16(*shape, d) for _ in range(4))
    o, lse = flash_attention_hopper.flash_attention_hopper(q, k, v, causal)
    grads = hopper_backward.flash_attention_hopper_backward(q, k, v, o, lse, do, causal)
    ref = attention_backward_dense(*(bf16_gemm.from_bf16_bits(backend.asnumpy(x)).astype(np.float64)
                                     for x in (q, k, v, do)), causal=causal)
    errors = {name: relative_error(bf16_gemm.from_bf16_bits(backend.asnumpy(got)), want)
              for name, got, want in zip(("dq", "dk", "dv"), grads, ref, strict=True)}
    return {"shape": [*shape, d], "relative_error": errors,
            "passed": all(e < BACKWARD_ERROR_BOUND for e in errors.values())}


def backward_checks() -> dict:
    out = {}
    for d in flash_attention_hopper.HEAD_DIMS:
        for causal in (False, True):
            for shape in ((1, 1, 128), (2, 3, 384), (1, 2, 640)):
                key = f"d{d}_{'causal' if causal else 'full'}_{shape[2]}"
                try:
                    out[key] = backward_check(d, causal, shape)
                except Exception as exc:
                    traceback.print_exc()
                    out[key] = {"error": f"{type(exc).__name__}: {exc}"[:500], "passed": False}
                print(key, out[key], flush=True)
    return out


def backward_row(d: int, causal: bool, seq: int, batch: int, heads: int, torch, interleaved) -> dict:
    """Median times and TFLOP/s of the course's backward and of SDPA's cuDNN and flash backwards, one shape."""
    flop = attention_backward_flop(batch, heads, seq, d, causal)
    q, k, v, do = (random_bf16(batch, heads, seq, d) for _ in range(4))
    o, lse = flash_attention_hopper.flash_attention_hopper(q, k, v, causal)
    grads = tuple(backend.xp.empty_like(q) for _ in range(3))
    fns = {"hopper_backward": functools.partial(hopper_backward.flash_attention_hopper_backward, q, k, v, o, lse, do,
                                                causal, grads)}
    if torch is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

        tq, tk, tv = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                      for _ in range(3))
        tdo = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16)
        for label, which in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel(which):
                out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            fns[label] = functools.partial(torch.autograd.grad, out, (tq, tk, tv), tdo, retain_graph=True)
    row = {"batch": batch, "heads": heads, **interleaved(fns, flop, rounds=8, repeat=4, flush=True)}
    if "sdpa_cudnn" in row:
        row["fraction_of_cudnn"] = row["sdpa_cudnn"]["median_s"] / row["hopper_backward"]["median_s"]
    return row


def backward_resources() -> dict:
    return {f"d{d}_{'causal' if causal else 'full'}": hopper_backward.backward_resources(d, causal)
            for d in flash_attention_hopper.HEAD_DIMS for causal in (False, True)}


def main() -> None:
    from benchmarks.hopper_kernels import environment, interleaved, sweep  # noqa: PLC0415  (it imports this module)

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write DIR/attention_backward_h200.json (or _h100.json)")
    parser.add_argument("--quick", action="store_true", help="sequence 4096, head dimension 128 only")
    args = parser.parse_args()
    results = {"script": "benchmarks/attention_backward.py", **environment(),
               "backward_resources": backward_resources(), "backward_checks": backward_checks()}
    print(json.dumps(results["backward_resources"]), flush=True)
    if all(c["passed"] for c in results["backward_checks"].values()):
        results["attention_backward"] = sweep(functools.partial(backward_row, interleaved=interleaved),
                                              (4096,) if args.quick else (4096, 16384),
                                              (128,) if args.quick else (128, 64))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        machine = "h200" if "H200" in results["device"] else "h100"
        (args.out / f"attention_backward_{machine}.json").write_text(json.dumps(results, indent=1, default=str))

if __name__ == "__main__":
    main()
