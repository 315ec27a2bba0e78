"""LoRA adapters on the capstone's linear layers: what the model's forward and backward run where a layer has one.

A linear layer y = x W + b of the model with an adapter (Hu et al. 2021, Section 4.1), x (n, d_in)::

    y  = x W + s·(x A) B + b                  A (d_in, r), B (r, d_out), s = α / r
    dX = dY Wᵀ + s·(dY Bᵀ) Aᵀ,  dA = s·xᵀ (dY Bᵀ),  dB = s·(x A)ᵀ dY      W and b frozen: no dW, no db

The two lines are lesson 10's pieces, ``lora_forward(x, w, a, b, scale)`` and ``lora_backward(x, w, a, b, scale,
dy)``, carried in an :class:`Adapters` with the matrices; the model (:func:`mlsys_lab.capstone.model.gpt_forward`,
``loss_and_grad``) calls :meth:`Adapters.linear` and :meth:`Adapters.linear_back` only when it is given adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.peft.qlora import lora_linear, lora_linear_backward
from mlsys_lab.validation import check_array, check_number, check_type


@dataclass(frozen=True)
class Adapters:
    """A (d_in, r) and B (r, d_out) by layer name (``"h0.proj"``: the linear whose weight is ``h0.proj.w``), the
    scale s, and the pieces that run them: ``forward(x, w, a, b, scale)`` and ``backward(x, w, a, b, scale, dy)``."""

    a: dict
    b: dict
    scale: float
    forward: Callable = lora_linear
    backward: Callable = lora_linear_backward

    def __post_init__(self) -> None:
        check_type("a", self.a, dict)
        check_type("b", self.b, dict)
        if set(self.a) != set(self.b):
            raise ValueError(f"a and b must name the same layers; got {sorted(self.a)} and {sorted(self.b)}")
        for name in self.a:
            a = check_array("a", self.a[name], ndim=2, kinds="f")
            if check_array("b", self.b[name], ndim=2, kinds="f").shape[0] != a.shape[1]:
                raise ValueError(f"b[{name!r}] must have r = {a.shape[1]} rows, as a[{name!r}] has columns; got "
                                 f"{self.b[name].shape}")
        check_number("scale", self.scale, low=0.0, low_inclusive=False, high=1e4)
        for name in ("forward", "backward"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name} must be a function; got {type(getattr(self, name)).__name__}")

    def linear(self, name: str, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """x W (x (..., d_in)), through the forward piece where layer ``name`` has an adapter."""
        if name not in self.a:
            return x @ weight
        y = self.forward(x.reshape(-1, x.shape[-1]), weight, self.a[name], self.b[name], self.scale)
        return np.asarray(y, dtype=x.dtype).reshape(*x.shape[:-1], weight.shape[1])

    def linear_back(self, name: str, x: np.ndarray, weight: np.ndarray, dy: np.ndarray, grads: dict) -> np.ndarray:
        """dX of :meth:`linear`; where ``name`` has an adapter, its dA and dB go to ``grads[name]``."""
        if name not in self.a:
            return dy @ weight.T
        dx, da, db = self.backward(x.reshape(-1, x.shape[-1]), weight, self.a[name], self.b[name], self.scale,
                                   dy.reshape(-1, dy.shape[-1]))
        grads[name] = (np.asarray(da, dtype=x.dtype), np.asarray(db, dtype=x.dtype))
        return np.asarray(dx, dtype=x.dtype).reshape(x.shape)
