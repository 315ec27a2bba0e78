"""Memory accounting for training (内存使用): what a step keeps, predicted from shapes and measured.

Per parameter, a training step keeps the weights, their gradients and the optimizer's state:

=================  =======  =========  ==================  ===============  ========
recipe             weights  gradients  master (fp32) copy  optimizer state  total
=================  =======  =========  ==================  ===============  ========
fp32 + Adam        4        4          —                   8 (m, v)         16
mixed + Adam       2        2          4                   8 (m, v)         16
mixed, fp32 grads  2        4          4                   8 (m, v)         18 (Megatron-LM)
fp32 + SGD         4        4          —                   0                8
=================  =======  =========  ==================  ===============  ========

Mixed precision (the recipe of Micikevicius et al. 2018) keeps fp16/bf16 weights and gradients for the math
and an fp32 master copy for the update; counted per parameter as ZeRO counts it (Rajbhandari et al. 2020,
§3.1), 2 + 2 + 12 = 16 bytes, the same as fp32 Adam. It saves activation memory and time, not optimizer
memory. Activations are the other term: for a transformer layer, Korthikanti et al. 2022 (eq. 2) count
s·b·h·(34 + 5·a·s/h) bytes with 16-bit activations.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from typing import Any, Callable

from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy.flash_attention_backward import AttentionBackwardBytes, attention_backward_bytes
from mlsys_lab.validation import check_choice, check_divides, check_finite, check_int, check_type

PRECISIONS = ("fp32", "mixed")
OPTIMIZERS = ("adam", "sgd", "sgd_momentum")
RECOMPUTE = ("none", "selective", "full")


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of each kind of training state."""

    weights: float
    gradients: float
    master_weights: float
    optimizer_state: float
    activations: float = 0.0
    workspace: float = 0.0  # transient buffers: the gradient in flight during the backward

    def __post_init__(self) -> None:
        for f in ("weights", "gradients", "master_weights", "optimizer_state", "activations", "workspace"):
            check_finite(f, getattr(self, f), low=0.0)

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.master_weights + self.optimizer_state + self.activations
                + self.workspace)

    def as_dict(self) -> dict[str, float]:
        return {"weights": self.weights, "gradients": self.gradients, "master weights": self.master_weights,
                "optimizer state": self.optimizer_state, "activations": self.activations,
                "workspace": self.workspace}


def training_memory_bytes(n_params: int, precision: str = "fp32", optimizer: str = "adam",
                          activation_bytes: float = 0.0, gradient_bytes: int | None = None) -> MemoryBreakdown:
    """Bytes of weights, gradients, fp32 master weights and optimizer state for ``n_params`` parameters.

    precision: "fp32" (4-byte weights and gradients) or "mixed" (2-byte weights and gradients plus a
    4-byte master copy). optimizer: "adam" (m and v, 4 bytes each), "sgd" (none), "sgd_momentum" (4).
    ``gradient_bytes`` (2 or 4) overrides the gradients' width: Megatron-LM keeps bf16 weights with fp32
    gradients (accumulated and all-reduced in fp32), so ``("mixed", "adam", gradient_bytes=4)`` is its
    2 + 4 + 4 + 8 = 18 B/param, where ZeRO's mixed-precision Adam with 16-bit gradients is 16.
    """
    n = check_int("n_params", n_params, low=0)
    check_choice("precision", precision, PRECISIONS)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    activation_bytes = check_finite("activation_bytes", activation_bytes, low=0.0)
    if gradient_bytes is not None:
        check_choice("gradient_bytes", gradient_bytes, (2, 4))
    low = 4 if precision == "fp32" else 2
    state_per_param = {"adam": 8, "sgd": 0, "sgd_momentum": 4}[optimizer]
    master = 0 if precision == "fp32" else 4
    grad = low if gradient_bytes is None else gradient_bytes
    return MemoryBreakdown(weights=n * low, gradients=n * grad, master_weights=n * master,
                           optimizer_state=n * state_per_param, activations=float(activation_bytes))


def transformer_params(n_layers: int, hidden: int, vocab: int) -> int:
    """12·L·h² + 13·L·h + V·h: attention (4h² + 4h), 4h MLP (8h² + 5h), two LayerNorms (4h), embedding.

    The count of :attr:`TransformerShape.n_params` for a GPT shape (4h GELU MLP).
    """
    return TransformerShape("", n_layers, hidden, 1, vocab).n_params


def transformer_layer_activation_bytes(batch: int, seq: int, hidden: int, n_heads: int,
                                       recompute: str = "none", value_bytes: int = 2) -> float:
    """Activation bytes one transformer layer keeps for backward (Korthikanti et al. 2022, §4.1).

    With 16-bit values and 1-byte dropout masks, no tensor parallelism:
      none:      s·b·h·(34 + 5·a·s/h)   attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh
      selective: s·b·h·34               the a·s² scores, softmax and its dropout are recomputed
      full:      s·b·h·2                only the layer's input is kept; the layer is recomputed
    Of the 34sbh + 5as²b, the masks are 2sbh + as²b bytes and the rest are 16sbh + 2as²b values, so
    ``value_bytes=4`` (fp32 activations) gives 66sbh + 9as²b.
    """
    s = check_int("seq", seq, low=1)
    b = check_int("batch", batch, low=1)
    h = check_int("hidden", hidden, low=1)
    a = check_int("n_heads", n_heads, low=1)
    check_choice("recompute", recompute, RECOMPUTE)
    check_choice("value_bytes", value_bytes, (2, 4))
    if recompute == "full":
        return float(value_bytes * s * b * h)
    values, masks = 16.0 * s * b * h, 2.0 * s * b * h
    if recompute == "none":
        values, masks = values + 2.0 * a * s * s * b, masks + 1.0 * a * s * s * b
    return value_bytes * values + masks


@dataclasses.dataclass(frozen=True)
class TransformerShape:
    """A decoder-only transformer's sizes: layers, width h, heads, vocabulary, MLP width and matrices.

    ``d_ff`` defaults to 4·h; ``n_mlp_matrices`` is 2 for a GELU MLP (GPT: up, down) and 3 for a gated
    SwiGLU MLP (LLaMA: gate, up, down). Two parameter counts, for two conventions:
    :attr:`n_params` (the model's own count: by default GPT-2's, with biases, two LayerNorms per layer
    and one tied embedding; LLaMA sets ``biases=False``, ``norm="rmsnorm"``, ``tied_embeddings=False``)
    and :attr:`n_matrix_params` (what the LoRA and QLoRA papers count: weight matrices and both
    embeddings).
    """

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    vocab: int
    d_ff: int | None = None  # None: 4·hidden
    n_mlp_matrices: int = 2
    biases: bool = True  # every linear layer has a bias (GPT-2, GPT-3); LLaMA has none
    norm: str = "layernorm"  # "layernorm": weight + bias, 2 per layer; "rmsnorm": weight only, 2 per layer + final
    tied_embeddings: bool = True  # the output layer reuses the input embedding (GPT-2); LLaMA's are separate

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        for field_name in ("n_layers", "hidden", "n_heads", "vocab"):
            check_int(field_name, getattr(self, field_name), low=1)
        check_choice("n_mlp_matrices", self.n_mlp_matrices, (2, 3))
        check_choice("norm", self.norm, ("layernorm", "rmsnorm"))
        for flag in ("biases", "tied_embeddings"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False; got {getattr(self, flag)!r:.60}")
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.hidden)
        check_int("d_ff", self.d_ff, low=1)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """Per-layer linear weights as (d_in, d_out): q, k, v, o and the MLP's matrices (what LoRA can adapt)."""
        h, f = self.hidden, self.d_ff
        shapes = {t: (h, h) for t in ("q", "k", "v", "o")}
        if self.n_mlp_matrices == 2:
            shapes.update({"up": (h, f), "down": (f, h)})
        else:
            shapes.update({"gate": (h, f), "up": (h, f), "down": (f, h)})
        return shapes

    @property
    def n_params(self) -> int:
        """Every linear weight (and bias), the norms and the embeddings, as the model itself counts them.

        GPT convention (the defaults): biases, two LayerNorms (4h) per layer, one tied embedding V·h; for
        a 4h GELU MLP this is :func:`transformer_params`, 12·L·h² + 13·L·h + V·h. LLaMA convention
        (``biases=False, norm="rmsnorm", tied_embeddings=False``): L·(4h² + 3·h·f + 2h) + h + 2·V·h,
        which for Llama-2 7B (L = 32, h = 4096, f = 11008, V = 32000) is 6,738,415,616.
        """
        shapes = self.linear_shapes().values()
        per_layer = sum(d_in * d_out + (d_out if self.biases else 0) for d_in, d_out in shapes)
        per_layer += 4 * self.hidden if self.norm == "layernorm" else 2 * self.hidden
        final_norm = self.hidden if self.norm == "rmsnorm" else 0
        embeddings = (1 if self.tied_embeddings else 2) * self.vocab * self.hidden
        return self.n_layers * per_layer + final_norm + embeddings

    @property
    def n_matrix_params(self) -> int:
        """Every layer's linear weights plus the input and output embeddings, 2·V·h (biases and norms left out)."""
        per_layer = sum(d_in * d_out for d_in, d_out in self.linear_shapes().values())
        return self.n_layers * per_layer + 2 * self.vocab * self.hidden


# Shapes from the papers (GPT-2: Radford et al. 2019; GPT-3: Brown et al. 2020, Table 2.1; Llama 2:
# Touvron et al. 2023 and the released configs: SwiGLU MLP of width 11008 / 13824, no biases, RMSNorm,
# separate input and output embeddings; 6,738,415,616 and 13,015,864,320 parameters).
_LLAMA = dict(n_mlp_matrices=3, biases=False, norm="rmsnorm", tied_embeddings=False)
TRANSFORMER_SHAPES = {shape.name: shape for shape in (
    TransformerShape("GPT-2 XL (1.5B)", 48, 1600, 25, 50257),
    TransformerShape("Llama-2 7B", 32, 4096, 32, 32000, d_ff=11008, **_LLAMA),
    TransformerShape("Llama-2 13B", 40, 5120, 40, 32000, d_ff=13824, **_LLAMA),
    TransformerShape("GPT-3 175B", 96, 12288, 96, 50257),
)}


def transformer_training_bytes(shape: TransformerShape, batch: int, seq: int, precision: str = "mixed",
                               optimizer: str = "adam", recompute: str = "none") -> MemoryBreakdown:
    """Weights, gradients, master weights, optimizer state and all layers' activations for one step.

    Activations: n_layers × :func:`transformer_layer_activation_bytes` (16-bit values when mixed,
    32-bit when fp32). Left out: the embedding/logit activations, temporary buffers, the CUDA
    context and allocator fragmentation, which add a few GB in practice.
    """
    check_type("shape", shape, TransformerShape)
    value_bytes = 2 if check_choice("precision", precision, PRECISIONS) == "mixed" else 4
    per_layer = transformer_layer_activation_bytes(batch, seq, shape.hidden, shape.n_heads, recompute,
                                                   value_bytes)
    return training_memory_bytes(shape.n_params, precision, optimizer, shape.n_layers * per_layer)


def attention_backward_model_bytes(shape: TransformerShape, batch: int, seq: int,
                                   value_bytes: int = 2) -> tuple[AttentionBackwardBytes, AttentionBackwardBytes]:
    """(one layer, all layers) of what attention keeps for its backward: a fused (FlashAttention) backward's O and
    log-sum-exp against the probabilities P of one that stores them (the 2·a·s²·b of Korthikanti's count), from
    :func:`~mlsys_lab.kernels.memory_hierarchy.flash_attention_backward.attention_backward_bytes` with head
    dimension hidden / n_heads."""
    check_type("shape", shape, TransformerShape)
    check_divides("n_heads", shape.n_heads, of_name="hidden", of_value=shape.hidden)
    layer = attention_backward_bytes(batch, shape.n_heads, seq, shape.hidden // shape.n_heads, value_bytes)
    n = shape.n_layers
    return layer, AttentionBackwardBytes(n * layer.qkv, n * layer.fused, n * layer.stored_p)


def mlp_step_bytes(d_in: int, width: int, n_blocks: int, n_classes: int, batch: int, *, expansion: int = 4,
                   optimizer: str = "adam", bytes_per_value: int = 4) -> MemoryBreakdown:
    """Prediction, from shapes alone, of what a training step of ``training.MLP`` keeps (fp32).

    Parameters: stem d_in·d + d, blocks n·(2·e·d² + e·d), head d·C + C. Activations kept for
    backward: the input (B·d_in), per block its input and tanh output (B·d·(1 + e)), the head's
    input (B·d) and the softmax probabilities (B·C). Workspace, the larger of: during the backward,
    the gradient arriving at the widest activation and the local derivative made from it
    (2·B·e·d), beside everything kept; during the update, Adam's one scratch array of the largest
    parameter (e·d²).
    """
    for name, value in (("d_in", d_in), ("width", width), ("n_classes", n_classes), ("batch", batch),
                        ("expansion", expansion)):
        check_int(name, value, low=1)
    check_int("n_blocks", n_blocks, low=0)
    check_choice("bytes_per_value", bytes_per_value, (1, 2, 4, 8))
    d, e, B = width, expansion, batch
    n_params = d_in * d + d + n_blocks * (2 * e * d * d + e * d) + d * n_classes + n_classes
    activations = B * (d_in + n_blocks * d * (1 + e) + d + n_classes) * bytes_per_value
    states = training_memory_bytes(n_params, "fp32", optimizer, activation_bytes=activations)
    widest = B * max(d * e if n_blocks else d, d_in, n_classes) * bytes_per_value
    largest_param = max(d * e * d if n_blocks else 0, d_in * d, d * n_classes) * bytes_per_value
    return dataclasses.replace(states, workspace=float(max(2 * widest, largest_param)))


def measure_peak_bytes(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """Run ``fn()``; return (result, peak bytes allocated during it, bytes still allocated after it).

    Only memory allocated during the call counts: freeing arrays that existed before does not lower
    it. On NumPy, tracemalloc sees every array allocation (NumPy reports them to it); on CuPy, a
    memory-pool hook counts the device blocks handed out.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable; got {type(fn).__name__} {fn!r:.40}")
    if backend.on_gpu:
        return _measure_gpu(fn)
    started_here = not tracemalloc.is_tracing()
    if started_here:
        tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = fn()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        if started_here:
            tracemalloc.stop()
    return result, peak - base, current - base


def _measure_gpu(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    cuda = backend.xp.cuda

    class PeakHook(cuda.MemoryHook):
        """Counts pool blocks handed out during the call; frees of older blocks are ignored."""

        name = "mlsys_lab_peak"

        def __init__(self) -> None:
            self.sizes: dict[int, int] = {}
            self.live = 0
            self.peak = 0

        def malloc_postprocess(self, **kwargs) -> None:
            self.sizes[kwargs["mem_ptr"]] = kwargs["mem_size"]
            self.live += kwargs["mem_size"]
            self.peak = max(self.peak, self.live)

        def free_postprocess(self, **kwargs) -> None:
            self.live -= self.sizes.pop(kwargs["mem_ptr"], 0)

    hook = PeakHook()
    backend.sync()
    with hook:
        result = fn()
        backend.sync()
    return result, hook.peak, hook.live


