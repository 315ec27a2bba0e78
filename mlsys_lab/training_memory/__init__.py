"""Lesson 06, training memory: autodiff, optimizers, where training memory goes, recomputation, quantization,
sparsity, compression, checkpoint files.

    from mlsys_lab.training_memory import make_mlp, random_batch, forward_backward, mlp_step_bytes
    model = make_mlp(32, 64, 16, 10)
    stats = forward_backward(model, *random_batch(256, 32, 10), segment_length=4)   # checkpoint every 4 blocks
    stats.peak_activation_bytes                        # what the tapes kept at their peak

Modules, in the order of the lesson:

* :mod:`.training`: A residual MLP on the autodiff engine, trained with the floor's optimizers (训练流程).
* :mod:`.diff_modes`: Three ways to differentiate besides the tape (微分方式): numerical, symbolic, forward mode.
* :mod:`.autodiff`: A small reverse-mode automatic differentiation engine over ``xp`` arrays (NumPy or CuPy).
* :mod:`.hogwild`: Hogwild! (Niu, Recht, Ré, Wright 2011): parallel SGD on shared weights, with no locks at all.
* :mod:`.accounting`: Memory accounting for training (内存使用): what a step keeps, predicted from shapes and
  measured; the transformer shapes later lessons count with.
* :mod:`.mixed_precision`: fp16 and bf16 from their bit layouts, loss scaling, fp32 master weights (混合精度).
* :mod:`.fp8`: FP8 E4M3 rounding (ties to even, saturating) and DeepSeek-V3's per-block scales (1 × 128, 128 × 128).
* :mod:`.fp8_gemm`: the block-scaled FP8 GEMM with limited-precision accumulation promoted to FP32 every 128
  products (DeepSeek-V3 §3.3.2), and the error bound a GPU kernel of it is checked with.
* :mod:`.recompute`: Activation (gradient) checkpointing on the autodiff engine, measured (Chen et al. 2016);
  any plan of segments over a chain of uneven layers, run event by event.
* :mod:`.quantize`: Quantization (量化): integers plus scales in place of floats, and what it costs in error;
  NF4 and its block-wise quantizer.
* :mod:`.sparsity`: Weight sparsity (权重稀疏化): unstructured magnitude pruning vs 2:4 semi-structured sparsity.
* :mod:`.weight_compression`: Lossless compression of weights and messages (无损压缩): fewer bytes to move,
  time spent to decompress.
* :mod:`.weights_io`: Loading weight files (权重文件的加载): pickle vs safetensors, whole file vs one layer.

The optimizers (SGD, Adam) are the floor's, :mod:`mlsys_lab.nn`; the int8 weight-only matmul kernel is
:mod:`mlsys_lab.kernels.training_memory.int8_matmul`.
"""

from mlsys_lab.training_memory.accounting import (
    TRANSFORMER_SHAPES,
    MemoryBreakdown,
    TransformerShape,
    measure_peak_bytes,
    mlp_step_bytes,
    training_memory_bytes,
    transformer_layer_activation_bytes,
    transformer_params,
    transformer_training_bytes,
)
from mlsys_lab.training_memory.autodiff import Tape, Tensor
from mlsys_lab.training_memory.diff_modes import forward_mode_gradient, numerical_gradient
from mlsys_lab.training_memory.hogwild import hogwild_sgd, overlap_probability
from mlsys_lab.training_memory.mixed_precision import BF16, FP16, FP32, FloatFormat, to_bfloat16
from mlsys_lab.training_memory.quantize import dequantize, nf4_levels, nf4_quantize_dequantize, quantize
from mlsys_lab.training_memory.recompute import (
    checkpoint_sweep,
    forward_backward,
    predicted_peak_bytes,
    recompute_time_ratio,
    simulate_checkpoint_plan,
)
from mlsys_lab.training_memory.sparsity import prune_n_m, prune_unstructured
from mlsys_lab.training_memory.training import (
    MLP,
    forward_loss,
    fresh_adam_steps,
    make_mlp,
    random_batch,
    spiral_data,
    train_mlp,
    train_mlp_step,
)
from mlsys_lab.training_memory.weight_compression import break_even_bandwidth, compressed_transfer_seconds
from mlsys_lab.training_memory.weights_io import measure_load

__all__ = [
    "BF16",
    "FP16",
    "FP32",
    "FloatFormat",
    "MLP",
    "TRANSFORMER_SHAPES",
    "MemoryBreakdown",
    "Tape",
    "Tensor",
    "TransformerShape",
    "break_even_bandwidth",
    "checkpoint_sweep",
    "compressed_transfer_seconds",
    "dequantize",
    "forward_backward",
    "forward_loss",
    "forward_mode_gradient",
    "fresh_adam_steps",
    "hogwild_sgd",
    "make_mlp",
    "measure_load",
    "measure_peak_bytes",
    "mlp_step_bytes",
    "nf4_levels",
    "nf4_quantize_dequantize",
    "numerical_gradient",
    "overlap_probability",
    "predicted_peak_bytes",
    "prune_n_m",
    "prune_unstructured",
    "quantize",
    "random_batch",
    "recompute_time_ratio",
    "simulate_checkpoint_plan",
    "spiral_data",
    "train_mlp",
    "to_bfloat16",
    "train_mlp_step",
    "training_memory_bytes",
    "transformer_layer_activation_bytes",
    "transformer_params",
    "transformer_training_bytes",
]
