"""A 3D-parallel planner: enumerate DP × TP × PP (× ZeRO stage, micro-batch size), estimate, rank.

Cost model (each term from the paper named beside it):

* parameters  Ψ = 12·l·h² (1 + 13/(12h) + (V+s)/(12·l·h))            Narayanan et al. 2021, §5.1
* FLOPs/step  F = 96·B·s·l·h² (1 + s/(6h) + V/(16·l·h))  with recompute (72·… and V/(12lh) without)
* model states per GPU: ZeRO formulas on Ψ/(t·p) over the d data-parallel ranks  (Rajbhandari 2020)
* activations per layer and micro-batch, bytes: s·b·h·(10 + 24/t + 5·a·s/(h·t)); with full
  recomputation only the layer input, 2·s·b·h, is kept            (Korthikanti et al. 2022, Table 2);
  a 1F1B stage holds min(p, m) micro-batches of its l/p layers.
* time per step  T = (m + p − 1)·(t_compute + t_tp + t_p2p) + t_dp   with per-micro-batch-stage times:
  t_compute = F / (n · peak · efficiency · m);  t_tp = (l/p) · k · ring all-reduce of 2·b·s·h bytes
  (k = 4 all-reduces per layer, 6 with recompute: Megatron's f and g);  t_p2p = 2 sends of 2·b·s·h/t;
  t_dp = ring all-reduce of 2·Ψ/(t·p) gradient bytes over d ranks (×1.5 at ZeRO-3), not overlapped.
* bandwidth: ranks are numbered TP fastest, then DP, then PP (Megatron's order); a group whose
  ranks fit in one node uses the intra-node link (NVLink). A group that spans nodes with k of its
  ranks in each node runs as NCCL does, min(k, C) channels each leaving the node on its own NIC
  (lesson 07's :func:`~mlsys_lab.collectives.cost.flat_ring_allreduce_time`): min(k, C)·B_net,
  capped by NVLink, with B_net = ``inter_node_bytes_per_s`` per NIC (one NIC per GPU) and
  C = ``n_channels``. TP 16 on 8-GPU nodes has k = 8; a DP group of TP-8 ranks has k = 1, one NIC.
  ``n_channels=1`` is the single-ring strawman that runs every cross-node group at one NIC's speed.

``efficiency`` (achieved fraction of peak in the GEMMs) is the one free constant; the lesson fixes it
on one published run and predicts the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlsys_lab.collectives.cost import allreduce_time, flat_ring_allreduce_time
from mlsys_lab.parallelism.zero import zero_memory_per_gpu
from mlsys_lab.validation import check_bool, check_divides, check_finite, check_int, check_number, check_type

BYTES_PER_VALUE = 2  # fp16 / bf16 activations and gradients
MAX_GPUS = 2**20  # a cluster's GPUs: enumerate_plans tries every divisor, so the count bounds its work
MAX_SIZE = 10**7  # layers, heads, GPUs, degrees: a bound far above any real run, so no loop runs unbounded


@dataclass(frozen=True)
class ModelSpec:
    """A GPT-style model: l layers, hidden h, a heads, sequence s, vocabulary V.

    Not lesson 06's :class:`~mlsys_lab.training_memory.accounting.TransformerShape`: the planner needs
    the sequence length (FLOPs, activations) and counts Ψ as Megatron-LM does, with the s·h position
    embeddings, where TransformerShape counts 12·l·h² + 13·l·h + V·h.
    """

    n_layers: int
    hidden: int
    n_heads: int
    seq_len: int = 2048
    vocab: int = 51200
    name: str = ""

    def __post_init__(self):
        for field in ("n_layers", "hidden", "n_heads", "seq_len", "vocab"):
            check_int(field, getattr(self, field), low=1, high=MAX_SIZE)
        check_type("name", self.name, str)

    @property
    def n_params(self) -> float:
        """Ψ = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) (Narayanan et al. 2021, §5.1)."""
        l, h, s, v = self.n_layers, self.hidden, self.seq_len, self.vocab
        return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))

    def flops_per_step(self, global_batch: int, recompute: bool = True) -> float:
        """Narayanan et al. 2021 eq. (3): matmul FLOPs per iteration (recompute adds a forward)."""
        b, s, l, h, v = global_batch, self.seq_len, self.n_layers, self.hidden, self.vocab
        if recompute:
            return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
        return 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


@dataclass(frozen=True)
class ClusterSpec:
    """n GPUs in nodes of g; per-GPU memory, peak FLOP/s and link bandwidths (bytes/s, each way).

    ``inter_node_bytes_per_s`` is one NIC's rate, with one NIC per GPU; ``n_channels`` (default g)
    is how many NCCL channels, one per NIC, a collective spread over nodes uses (module docstring).
    """

    n_gpus: int
    gpus_per_node: int
    memory_bytes: float
    peak_flop_per_s: float
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    latency_s: float = 5e-6
    name: str = ""
    n_channels: int | None = None

    def __post_init__(self):
        check_int("n_gpus", self.n_gpus, low=1, high=MAX_GPUS)
        check_int("gpus_per_node", self.gpus_per_node, low=1, high=MAX_SIZE)
        for field in ("memory_bytes", "peak_flop_per_s", "intra_node_bytes_per_s", "inter_node_bytes_per_s"):
            check_finite(field, getattr(self, field), low=0.0, low_inclusive=False)
        check_finite("latency_s", self.latency_s, low=0.0)
        check_type("name", self.name, str)
        if self.n_channels is not None:
            check_int("n_channels", self.n_channels, low=1, high=MAX_SIZE)

    @property
    def channels(self) -> int:
        """NCCL channels of a cross-node collective: ``n_channels``, or one per GPU's NIC."""
        return self.gpus_per_node if self.n_channels is None else self.n_channels


@dataclass(frozen=True)
class Plan:
    dp: int
    tp: int
    pp: int
    zero_stage: int = 0
    micro_batch: int = 1
    recompute: bool = True

    def __post_init__(self):
        for field in ("dp", "tp", "pp", "micro_batch"):
            check_int(field, getattr(self, field), low=1, high=MAX_SIZE)
        check_int("zero_stage", self.zero_stage, low=0, high=3)
        check_bool("recompute", self.recompute)


@dataclass(frozen=True)
class Estimate:
    plan: Plan
    n_microbatches: int
    memory_bytes: dict  # "model_states", "activations", "total"
    seconds: dict  # "compute", "tp_comm", "p2p", "bubble", "dp_comm", "total"
    flop_per_s_per_gpu: float  # F / (n · T), the figure Megatron-LM reports
    fits: bool

    def __post_init__(self):
        check_type("plan", self.plan, Plan)
        check_int("n_microbatches", self.n_microbatches, low=1)
        check_type("memory_bytes", self.memory_bytes, dict)
        check_type("seconds", self.seconds, dict)
        check_finite("flop_per_s_per_gpu", self.flop_per_s_per_gpu, low=0.0)
        check_bool("fits", self.fits)


def _link(group_span: int, cluster: ClusterSpec) -> float:
    """One link's rate for a point-to-point send between ranks ``group_span`` apart: NVLink or one NIC."""
    inside = group_span <= cluster.gpus_per_node
    return cluster.intra_node_bytes_per_s if inside else cluster.inter_node_bytes_per_s


def _group_allreduce_seconds(n_bytes: float, n_ranks: int, stride: int, cluster: ClusterSpec) -> float:
    """Ring all-reduce over ``n_ranks`` ranks ``stride`` apart (lesson 07's α-β model, NCCL's channels).

    Inside a node: 2(p−1)·α + 2(p−1)/p·n/B_nvlink. Across nodes, with k = the group's ranks per node:
    2(p−1)·α + 2(p−1)/p·n / min(min(k, C)·B_net, B_nvlink).
    """
    g = cluster.gpus_per_node
    if n_ranks * stride <= g or n_ranks == 1:
        return float(allreduce_time("ring", n_bytes, n_ranks, cluster.latency_s, 1 / cluster.intra_node_bytes_per_s))
    per_node = math.gcd(n_ranks, max(1, g // stride))  # ranks per node, a divisor of the group
    channels = min(per_node, cluster.channels)
    return float(flat_ring_allreduce_time(n_bytes, n_ranks // per_node, per_node, cluster.latency_s,
                                          1 / cluster.inter_node_bytes_per_s, n_channels=channels,
                                          beta_intra=1 / cluster.intra_node_bytes_per_s if channels > 1 else 0.0))


def _check_specs(model, cluster, global_batch, plan=None) -> int:
    """The spec arguments are the planner's dataclasses and the batch a positive integer; returns the batch."""
    for name, value, cls in (("model", model, ModelSpec), ("cluster", cluster, ClusterSpec), ("plan", plan, Plan)):
        if (value is not None or name != "plan") and not isinstance(value, cls):
            raise TypeError(f"{name} must be a {cls.__name__}; got {type(value).__name__}")
    return check_int("global_batch", global_batch, low=1)


def estimate(model: ModelSpec, cluster: ClusterSpec, plan: Plan, global_batch: int,
             efficiency: float = 0.5) -> Estimate:
    """Memory per GPU and step time of ``plan`` (see the module docstring for every term)."""
    check_type("plan", plan, Plan)
    _check_specs(model, cluster, global_batch, plan)
    d, t, p = plan.dp, plan.tp, plan.pp
    if d * t * p != cluster.n_gpus:
        raise ValueError(f"dp·tp·pp must equal n_gpus={cluster.n_gpus}; got {d}·{t}·{p} = {d * t * p}")
    check_divides("tp", t, of_name="n_heads", of_value=model.n_heads)
    check_divides("pp", p, of_name="n_layers", of_value=model.n_layers)
    check_int("zero_stage", plan.zero_stage, low=0, high=3)
    efficiency = check_number("efficiency", efficiency, low=0.0, high=1.0, low_inclusive=False)
    global_batch = check_int("global_batch", global_batch, low=1)
    if global_batch % (d * plan.micro_batch):
        raise ValueError(f"dp·micro_batch = {d * plan.micro_batch} must divide global_batch={global_batch}")
    m = global_batch // (d * plan.micro_batch)
    b, s, h, a, l = plan.micro_batch, model.seq_len, model.hidden, model.n_heads, model.n_layers
    states = zero_memory_per_gpu(model.n_params / (t * p), d, plan.zero_stage)
    per_layer_full = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    per_layer = 2 * s * b * h if plan.recompute else per_layer_full
    activations = (l / p) * min(p, m) * per_layer + (per_layer_full if plan.recompute else 0.0)
    flops = model.flops_per_step(global_batch, plan.recompute)
    t_compute = flops / (cluster.n_gpus * cluster.peak_flop_per_s * efficiency * m)
    n_allreduce = 6 if plan.recompute else 4
    act_bytes = BYTES_PER_VALUE * b * s * h
    t_tp = (l / p) * n_allreduce * _group_allreduce_seconds(act_bytes, t, 1, cluster)
    t_p2p = 0.0 if p == 1 else 2 * act_bytes / t / _link(t * d * p, cluster)
    grad_bytes = BYTES_PER_VALUE * model.n_params / (t * p)
    t_dp = _group_allreduce_seconds(grad_bytes, d, t, cluster)
    t_dp *= 1.5 if plan.zero_stage == 3 else 1.0
    slot = t_compute + t_tp + t_p2p
    total = (m + p - 1) * slot + t_dp
    seconds = {"compute": m * t_compute, "tp_comm": m * t_tp, "p2p": m * t_p2p, "bubble": (p - 1) * slot,
               "dp_comm": t_dp, "total": total}
    memory = {"model_states": states, "activations": activations, "total": states + activations}
    fits = memory["total"] <= cluster.memory_bytes
    return Estimate(plan, m, memory, seconds, flops / (cluster.n_gpus * total), fits)


def enumerate_plans(model: ModelSpec, cluster: ClusterSpec, global_batch: int,
                    micro_batches=(1, 2, 4, 8), zero_stages=(0, 1, 2, 3),
                    recompute: bool = True) -> list[Plan]:
    """Every valid (dp, tp, pp, zero stage, micro-batch) for the cluster (ZeRO-2/3 only with pp = 1)."""
    _check_specs(model, cluster, global_batch)
    n = check_int("n_gpus", cluster.n_gpus, low=1)
    for label, options, high in (("micro_batches", micro_batches, MAX_SIZE), ("zero_stages", zero_stages, 3)):
        check_type(label, options, (list, tuple, range))
        for option in options:
            check_int(label, option, low=0 if label == "zero_stages" else 1, high=high)
    check_bool("recompute", recompute)
    plans = []
    for t in range(1, n + 1):
        if n % t or model.n_heads % t:
            continue
        for p in range(1, n // t + 1):
            if (n // t) % p or model.n_layers % p:
                continue
            d = n // (t * p)
            for mb in micro_batches:
                if global_batch % (d * mb):
                    continue
                for z in zero_stages:
                    if z >= 2 and p > 1:
                        continue
                    plans.append(Plan(d, t, p, z, mb, recompute))
    return plans


def rank_plans(model: ModelSpec, cluster: ClusterSpec, global_batch: int, efficiency: float = 0.5,
               **kwargs) -> list[Estimate]:
    """Estimates of every plan that fits in memory, fastest first."""
    estimates = [estimate(model, cluster, plan, global_batch, efficiency)
                 for plan in enumerate_plans(model, cluster, global_batch, **kwargs)]
    return sorted((e for e in estimates if e.fits), key=lambda e: e.seconds["total"])


def calibrate_efficiency(model: ModelSpec, cluster: ClusterSpec, plan: Plan, global_batch: int,
                         measured_flop_per_s_per_gpu: float) -> float:
    """The GEMM efficiency at which :func:`estimate` reproduces a measured FLOP/s per GPU (bisection)."""
    check_type("plan", plan, Plan)
    target = check_finite("measured_flop_per_s_per_gpu", measured_flop_per_s_per_gpu, low=0.0, low_inclusive=False)
    low, high = 1e-4, 1.0
    ceiling = estimate(model, cluster, plan, global_batch, high).flop_per_s_per_gpu
    if ceiling < target:  # name the cluster's numbers: one of them (or the measurement) is off
        rates = ", ".join(f"{name}={getattr(cluster, name):.3g}" for name in (
            "peak_flop_per_s", "intra_node_bytes_per_s", "inter_node_bytes_per_s", "latency_s"))
        raise ValueError(f"measured_flop_per_s_per_gpu={target:.3g} is above the {ceiling:.3g} FLOP/s per GPU that the "
                         f"model allows at efficiency 1 on this cluster ({rates})")
    for _ in range(60):
        mid = (low + high) / 2
        if estimate(model, cluster, plan, global_batch, mid).flop_per_s_per_gpu < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# --- the published runs the planner is checked against ---------------------------------------
def selene(n_gpus: int) -> ClusterSpec:
    """NVIDIA Selene as in Megatron-LM 2021: DGX A100 80GB nodes of 8, 312 TFLOP/s fp16 dense,
    NVLink 3 300 GB/s each way per GPU, 8 × HDR 200 Gb/s InfiniBand per node = 25 GB/s per GPU."""
    return ClusterSpec(check_int("n_gpus", n_gpus, low=1), 8, 80e9, 312e12, 300e9, 25e9,
                       name="Selene (A100)")


def megatron_runs() -> list[dict]:
    """Rows of Megatron-LM's Table 1 (Narayanan et al. 2021) from ``data/parallelism_megatron_2021.json``."""
    from mlsys_lab import records

    table = records.load("parallelism_megatron_2021")
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def megatron_model(run: dict) -> ModelSpec:
    """The GPT model of one row of :func:`megatron_runs`, named like ``"GPT 145.6B"``."""
    check_type("run", run, dict)
    for key in ("n_layers", "hidden", "n_heads", "params_billion"):
        if key not in run:
            raise ValueError(f"run must be a row of megatron_runs() (with {key!r}); got keys {sorted(run)}")
    return ModelSpec(run["n_layers"], run["hidden"], run["n_heads"], name=f"GPT {run['params_billion']:g}B")


def megatron_models() -> dict[str, ModelSpec]:
    """The GPT models of Megatron-LM's Table 1 (Narayanan et al. 2021), by name (``"GPT 1.7B"`` … ``"GPT 1008B"``)."""
    return {model.name: model for model in map(megatron_model, megatron_runs())}


def predict_megatron_runs(calibrate_on: int = 0, micro_batch: int = 1) -> list[dict]:
    """Fix ``efficiency`` on run ``calibrate_on``, then predict every run's TFLOP/s per GPU.

    Each run uses its published (t, p), d = n/(t·p), no ZeRO (the paper keeps full optimizer
    states per data-parallel rank), activation recomputation, the non-interleaved 1F1B bubble and an
    assumed micro-batch size (Table 1 does not list it). Returns rows with predicted and error.
    """
    runs = megatron_runs()
    check_int("calibrate_on", calibrate_on, low=0, high=len(runs) - 1)
    check_int("micro_batch", micro_batch, low=1, high=MAX_SIZE)

    def parts(run):
        plan = Plan(run["n_gpus"] // (run["tp"] * run["pp"]), run["tp"], run["pp"], 0, micro_batch, True)
        return megatron_model(run), selene(run["n_gpus"]), plan, run["global_batch"]

    published = runs[calibrate_on]["tflop_per_s_per_gpu"] * 1e12
    efficiency = calibrate_efficiency(*parts(runs[calibrate_on]), published)
    out = []
    for index, run in enumerate(runs):
        est = estimate(*parts(run), efficiency)
        predicted = est.flop_per_s_per_gpu / 1e12
        out.append({**run, "predicted_tflop_per_s": predicted, "efficiency": efficiency,
                    "relative_error": predicted / run["tflop_per_s_per_gpu"] - 1,
                    "calibration": index == calibrate_on, "estimate": est})
    return out
