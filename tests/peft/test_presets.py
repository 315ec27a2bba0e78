"""Does every model preset count its paper's parameters? (Issue 31, erratum 10.)

Every :class:`TransformerShape` preset of the course (lesson 06's ``TRANSFORMER_SHAPES``, lesson 10's ``MODELS``) is
checked against the figure its paper prints, to one unit of the figure's last printed digit, and, where the
released checkpoint's exact count is known, against that count: the preset's :attr:`n_params` plus what its
convention leaves out (GPT-2's learned positions and final LayerNorm). A LLaMA preset that kept GPT-2's defaults
(tied embeddings, biases, LayerNorm) counted 6.61 B for LLaMA-7B, where the paper has 6.7 B and the checkpoint
6,738,415,616.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mlsys_lab.peft.accounting import MODELS
from mlsys_lab.training_memory.accounting import TRANSFORMER_SHAPES, TransformerShape

PRESETS = {**TRANSFORMER_SHAPES, **MODELS}


@dataclass(frozen=True)
class Published:
    figure: float  # parameters, as the paper prints them
    digit: float  # one unit of the figure's last printed digit
    source: str
    checkpoint: int | None = None  # the released weights' exact count, where known
    left_out: int = 0  # what the preset's convention does not count (and the checkpoint holds)


PUBLISHED = {
    "GPT-2 XL (1.5B)": Published(1.5e9, 0.1e9, "Radford et al. 2019, Table 2 prints 1542M, which under-counts (its "
                                 "'117M' model has 124M); the model card's 1.5B and the released checkpoint",
                                 checkpoint=1_557_611_200, left_out=1024 * 1600 + 2 * 1600),  # positions, final LN
    "GPT-3 175B": Published(175e9, 1e9, "Brown et al. 2020, Table 2.1: 175.0B, the nominal size (no checkpoint is "
                            "public; 12·l·h² + 13·l·h + V·h gives 174.6B)"),
    "Llama-2 7B": Published(7e9, 1e9, "Touvron et al. 2023 (Llama 2), Table 1: 7B", checkpoint=6_738_415_616),
    "Llama-2 13B": Published(13e9, 1e9, "Touvron et al. 2023 (Llama 2), Table 1: 13B", checkpoint=13_015_864_320),
    "LLaMA-7B": Published(6.7e9, 0.1e9, "Touvron et al. 2023 (LLaMA), Table 2: 6.7B", checkpoint=6_738_415_616),
    "LLaMA-65B": Published(65.2e9, 0.1e9, "Touvron et al. 2023 (LLaMA), Table 2: 65.2B (65.29B, truncated)"),
}


def test_every_preset_has_its_published_count():
    assert set(PRESETS) == set(PUBLISHED), "a preset without its paper's count, or a count without its preset"
    assert all(isinstance(shape, TransformerShape) for shape in PRESETS.values())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_its_papers_parameters(name):
    shape, published = PRESETS[name], PUBLISHED[name]
    assert abs(shape.n_params - published.figure) < published.digit, (
        f"{name}: {shape.n_params:,} parameters; {published.source}")
    if published.checkpoint is not None:
        assert shape.n_params + published.left_out == published.checkpoint, published.source


def test_llama_presets_use_llamas_conventions():
    """LLaMA: no biases, RMSNorm, separate input and output embeddings, as the class's docstring says."""
    for name in ("LLaMA-7B", "LLaMA-65B", "Llama-2 7B", "Llama-2 13B"):
        shape = PRESETS[name]
        assert (shape.biases, shape.norm, shape.tied_embeddings, shape.n_mlp_matrices) == (False, "rmsnorm", False, 3)
    assert round(PRESETS["LLaMA-7B"].n_params / 1e9, 2) == 6.74
