"""Lesson 06, training memory: autodiff, optimizers, where training memory goes, recomputation, quantization,
sparsity, compression, checkpoint files.

* :mod:`.accounting`: Memory accounting for training (内存使用): what a step keeps, predicted from shapes and measured.
* :mod:`.autodiff`: A small reverse-mode automatic differentiation engine over ``xp`` arrays (NumPy or CuPy).
* :mod:`.diff_modes`: Three ways to differentiate besides the tape (微分方式): numerical, symbolic, forward mode.
* :mod:`.hogwild`: Hogwild! (Niu, Recht, Ré, Wright 2011): parallel SGD on shared weights, with no locks at all.
* :mod:`.quantize`: Quantization (量化): integers plus scales in place of floats, and what it costs in error.
* :mod:`.recompute`: Activation (gradient) checkpointing on the autodiff engine, measured (Chen et al. 2016).
* :mod:`.sparsity`: Weight sparsity (权重稀疏化): unstructured magnitude pruning vs 2:4 semi-structured sparsity.
* :mod:`.training`: A residual MLP on the autodiff engine, and the optimizers that train it (训练流程).
* :mod:`.weight_compression`: Lossless compression of weights and messages (无损压缩): fewer bytes to move,
  time spent to decompress.
* :mod:`.weights_io`: Loading weight files (权重文件的加载): pickle vs safetensors, whole file vs one layer.
"""
