"""The systems side of mixture of experts: shrinking batches, all-to-all, parameter accounting, serving.

* Shrinking batch: with B tokens, n experts and top-k routing an expert sees about t = B·k/n tokens.
  Its FFN does 2·t·d·f FLOP per matrix while reading d·f weights, so its arithmetic intensity is
  ≈ t FLOP/byte in bf16: it falls as experts are added (Shazeer et al. 2017, Section 3.1).
* All-to-all costs (flat and hierarchical) live with the other collectives in
  :mod:`mlsys_lab.collectives.cost`; the MoE lesson uses them from there.
* Accounting: total versus activated parameters of DeepSeek-V3 and GShard, from their configs.
* Serving: how many experts a decode batch activates, and the expert-weight bytes per token and per
  device with and without expert parallelism (DeepSpeed-MoE inference, GShard).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlsys_lab.validation import check_bool, check_finite, check_int, check_positive, check_type


def tokens_per_expert(n_tokens: int, n_experts: int, top_k: int = 1) -> float:
    """Expected tokens per expert under balanced routing: n_tokens · top_k / n_experts."""
    check_int("n_tokens", n_tokens, low=1)
    check_int("n_experts", n_experts, low=1)
    check_int("top_k", top_k, low=1, high=n_experts)
    return n_tokens * top_k / n_experts


def expert_ffn_intensity(tokens: float, d_model: int, d_ff: int, bytes_per_value: float = 2.0,
                         n_matrices: int = 2) -> float:
    """FLOP per byte of one expert FFN on ``tokens`` tokens.

    FLOP = 2 · tokens · d · f · n_matrices; bytes = (n_matrices · d · f + tokens · (2d + f)) · bytes_per_value
    (weights, plus input, output and hidden activations each read or written once).
    """
    check_finite("tokens", tokens, low=0, low_inclusive=False)
    check_int("d_model", d_model, low=1)
    check_int("d_ff", d_ff, low=1)
    check_int("n_matrices", n_matrices, low=1)
    check_positive("bytes_per_value", bytes_per_value)
    flop = 2.0 * tokens * d_model * d_ff * n_matrices
    n_bytes = (n_matrices * d_model * d_ff + tokens * (2 * d_model + d_ff)) * bytes_per_value
    return flop / n_bytes


# --- parameter accounting ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MoEModel:
    """Enough of a MoE transformer's config to count its total and activated parameters."""

    name: str
    d_model: int
    n_layers: int
    n_moe_layers: int
    d_ff_dense: int          # FFN width of the dense (non-MoE) layers
    d_ff_expert: int
    n_routed: int
    n_shared: int
    top_k: int
    attention_params_per_layer: int
    vocab: int
    ffn_matrices: int = 3    # SwiGLU: gate, up, down

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        for f in ("d_model", "n_layers", "d_ff_expert", "n_routed", "top_k", "vocab", "ffn_matrices"):
            check_int(f, getattr(self, f), low=1)
        check_int("n_moe_layers", self.n_moe_layers, low=0, high=self.n_layers)
        check_int("d_ff_dense", self.d_ff_dense, low=0)
        check_int("n_shared", self.n_shared, low=0)
        check_int("top_k", self.top_k, low=1, high=self.n_routed)
        check_int("attention_params_per_layer", self.attention_params_per_layer, low=0)

    def expert_params(self) -> int:
        return self.ffn_matrices * self.d_model * self.d_ff_expert

    def total_params(self) -> int:
        """Attention + dense FFNs + all experts + routers + input and output embeddings."""
        n_dense = self.n_layers - self.n_moe_layers
        return (self.n_layers * self.attention_params_per_layer
                + n_dense * self.ffn_matrices * self.d_model * self.d_ff_dense
                + self.n_moe_layers * ((self.n_routed + self.n_shared) * self.expert_params()
                                       + self.d_model * self.n_routed)
                + 2 * self.vocab * self.d_model)

    def activated_params(self) -> int:
        """What one token touches: the same, but only top_k routed + shared experts, and one embedding row.

        The input embedding is a table lookup (d values), so only the output projection counts.
        """
        n_dense = self.n_layers - self.n_moe_layers
        return (self.n_layers * self.attention_params_per_layer
                + n_dense * self.ffn_matrices * self.d_model * self.d_ff_dense
                + self.n_moe_layers * ((self.top_k + self.n_shared) * self.expert_params()
                                       + self.d_model * self.n_routed)
                + self.vocab * self.d_model)


def mla_params(d_model: int = 7168, n_heads: int = 128, q_rank: int = 1536, kv_rank: int = 512,
               qk_nope_dim: int = 128, qk_rope_dim: int = 64, v_dim: int = 128) -> int:
    """Weights of DeepSeek-V3's multi-head latent attention (DeepSeek-V2 paper, Section 2.1), norms excluded.

    W_DQ d×r_q, W_UQ r_q×H(d_nope+d_rope), W_DKV d×(r_kv+d_rope), W_UKV r_kv×H(d_nope+d_v), W_O H·d_v×d.
    """
    for label, value in (("d_model", d_model), ("n_heads", n_heads), ("q_rank", q_rank), ("kv_rank", kv_rank),
                         ("qk_nope_dim", qk_nope_dim), ("qk_rope_dim", qk_rope_dim), ("v_dim", v_dim)):
        check_int(label, value, low=1)
    return (d_model * q_rank + q_rank * n_heads * (qk_nope_dim + qk_rope_dim)
            + d_model * (kv_rank + qk_rope_dim) + kv_rank * n_heads * (qk_nope_dim + v_dim)
            + n_heads * v_dim * d_model)


# DeepSeek-V3 (DeepSeek-AI 2024, Section 4.2 and the released config.json): 61 layers, the first 3 dense
# (d_ff 18432), 58 MoE layers of 256 routed + 1 shared expert (d_ff 2048), 8 routed per token, vocab 129280.
DEEPSEEK_V3 = MoEModel("DeepSeek-V3", d_model=7168, n_layers=61, n_moe_layers=58, d_ff_dense=18432,
                       d_ff_expert=2048, n_routed=256, n_shared=1, top_k=8,
                       attention_params_per_layer=mla_params(), vocab=129280)

# GShard MoE(2048E, 36L) (Lepikhin et al. 2020, Table 3 and Section 5): d_model 1024, FFN 8192 (ReLU,
# two matrices), 16 heads; every other layer is MoE with top-2 of 2048 experts; vocab 32000 (assumed).
GSHARD_600B = MoEModel("GShard 600B", d_model=1024, n_layers=36, n_moe_layers=18, d_ff_dense=8192,
                       d_ff_expert=8192, n_routed=2048, n_shared=0, top_k=2,
                       attention_params_per_layer=4 * 1024 * 1024, vocab=32000, ffn_matrices=2)


def expert_combinations(n_experts: int, top_k: int) -> int:
    """Distinct sets of experts a token can use: C(n, k). DeepSeekMoE's argument for fine-grained experts."""
    check_int("n_experts", n_experts, low=1)
    check_int("top_k", top_k, low=1, high=n_experts)
    return math.comb(n_experts, top_k)


def fine_grained(n_experts: int, top_k: int, d_ff: int, m: int) -> tuple[int, int, int]:
    """DeepSeekMoE segmentation: split every expert into m of width d_ff/m, activate m·k of them.

    Returns (n_experts·m, top_k·m, d_ff/m); FLOP and parameters stay the same.
    """
    check_int("m", m, low=1)
    check_int("d_ff", d_ff, low=1)
    check_int("n_experts", n_experts, low=1)
    check_int("top_k", top_k, low=1, high=n_experts)
    if d_ff % m:
        raise ValueError(f"m must divide d_ff={d_ff}; got {m}")
    return n_experts * m, top_k * m, d_ff // m


def dispatch_bytes_per_gpu(tokens_per_gpu: int, top_k: int, d_model: int,
                           bytes_per_value: float = 2.0) -> float:
    """Bytes one GPU sends in one all-to-all dispatch: every token goes to k experts as a d_model vector.

    tokens · k · d_model · bytes (the combine sends the same back). The expert's hidden width d_ff
    does not appear: tokens travel at the model width, the FFN's inner width stays on the expert's GPU.
    """
    check_int("tokens_per_gpu", tokens_per_gpu, low=0)
    check_int("top_k", top_k, low=1)
    check_int("d_model", d_model, low=1)
    check_positive("bytes_per_value", bytes_per_value)
    return tokens_per_gpu * top_k * d_model * bytes_per_value


# --- serving: what expert parallelism does to weight traffic and memory -----------------------------
def expected_active_experts(n_tokens: int, n_experts: int, top_k: int) -> float:
    """Expected number of distinct experts that ``n_tokens`` tokens activate with uniform top-k routing:
    n · (1 − (1 − k/n)^T). One token: k; many tokens: all n."""
    check_int("n_tokens", n_tokens, low=0)
    check_int("n_experts", n_experts, low=1)
    check_int("top_k", top_k, low=1, high=n_experts)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** n_tokens)


def expert_bytes_per_token(batch_per_device: int, n_devices: int, n_experts: int, top_k: int,
                           expert_bytes: float, expert_parallel: bool) -> float:
    """Expert-weight bytes one decode step reads per generated token, per device.

    Replicated experts (data parallel): each device reads every expert its own ``batch_per_device`` tokens
    activate. Expert parallel: each device holds n_experts / n_devices experts, the all-to-all gathers to it
    every token (from all devices) routed to them, and it reads each of its active experts once for that
    whole group: the "same path, one batch" grouping that makes the effective batch per expert n_devices
    times larger (DeepSpeed-MoE inference, Rajbhandari et al. 2022)."""
    check_int("batch_per_device", batch_per_device, low=1)
    check_int("n_devices", n_devices, low=1)
    check_finite("expert_bytes", expert_bytes, low=0)
    check_bool("expert_parallel", expert_parallel)
    if not expert_parallel:
        return expected_active_experts(batch_per_device, n_experts, top_k) * expert_bytes / batch_per_device
    if n_experts % n_devices:
        raise ValueError(f"n_experts must be divisible by n_devices={n_devices}; got {n_experts}")
    # the whole group's tokens activate experts uniformly; this device holds 1/n_devices of them
    active_local = expected_active_experts(batch_per_device * n_devices, n_experts, top_k) / n_devices
    return active_local * expert_bytes / batch_per_device


def expert_memory_per_device(dense_bytes: float, expert_bytes: float, n_experts: int, n_devices: int) -> float:
    """Weight bytes one device holds with expert parallelism: the dense layers (replicated) plus
    n_experts / n_devices experts (GShard: each device stores 1/n of the experts)."""
    check_finite("dense_bytes", dense_bytes, low=0)
    check_finite("expert_bytes", expert_bytes, low=0)
    check_int("n_devices", n_devices, low=1)
    if check_int("n_experts", n_experts, low=1) % n_devices:
        raise ValueError(f"n_experts must be divisible by n_devices={n_devices}; got {n_experts}")
    return dense_bytes + expert_bytes * n_experts / n_devices
