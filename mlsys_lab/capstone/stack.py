"""Which pieces the capstone runs: the learner's, where their check passed, else the course's, and a table of which.

Each piece is looked up by its exercise's name through :func:`mlsys_lab.pieces.piece`, which prints one line per
piece ("ring_allreduce: yours (lesson 07 ...)" or "... the course's (yours is not written yet)"). The MPI ranks
look their pieces up themselves, from the same store (they inherit ``MLSYS_LAB_PIECES``), and rank 0 reports
which ones ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mlsys_lab import pieces
from mlsys_lab.capstone.dp import average_gradients, ring_allreduce_on_ranks
from mlsys_lab.capstone.model import ModelOps, attention_vjp, cross_entropy_with_grad, layer_norm_grad
from mlsys_lab.fault_tolerance.checkpoint_io import write_atomic

# name, lesson, what it does in the capstone, the course's version
PIECES: tuple[tuple[str, str, str, Callable], ...] = (
    ("softmax_cross_entropy", "06", "the loss and d loss / d logits of every step", cross_entropy_with_grad),
    ("layer_norm_backward", "06", "the backward of the 2L + 1 layer norms", layer_norm_grad),
    ("attention_backward", "12", "the backward of causal attention in every block (this lesson)", attention_vjp),
    ("ring_allreduce", "07", "sums the gradient buffer over the MPI ranks", ring_allreduce_on_ranks),
    ("average_gradients", "12", "packs, all-reduces and averages the gradients (this lesson)", average_gradients),
    ("crash_safe_writer", "09", "writes every checkpoint of the MPI run", write_atomic),
)


@dataclass(frozen=True)
class Stack:
    """The functions a run uses, and whose each one is ("yours" or "the course's")."""

    ops: ModelOps
    ring_allreduce: Callable
    average_gradients: Callable
    write_checkpoint: Callable
    whose: dict

    @staticmethod
    def course() -> Stack:
        """The course's pieces only (what the tests and the equality checks compare against)."""
        fns = {name: course for name, _, _, course in PIECES}
        return Stack(_ops(fns), fns["ring_allreduce"],
                     fns["average_gradients"], fns["crash_safe_writer"], dict.fromkeys(fns, "the course's"))


def _ops(fns: dict) -> ModelOps:
    return ModelOps(fns["softmax_cross_entropy"], fns["layer_norm_backward"], fns["attention_backward"])


def load_stack(quiet: bool = False) -> Stack:
    """Yours, else the course's, for every piece; one printed line per piece unless ``quiet``."""
    fns, whose = {}, {}
    for name, _, _, course in PIECES:
        fns[name] = pieces.piece(name, course=course, quiet=quiet)
        whose[name] = "yours" if fns[name] is not course else "the course's"
    return Stack(_ops(fns), fns["ring_allreduce"],
                 fns["average_gradients"], fns["crash_safe_writer"], whose)


def pieces_rows() -> list[dict[str, str]]:
    """One row per piece: its name, the lesson it comes from, what it does here, and whose version runs."""
    rows = []
    for name, lesson, role, _ in PIECES:
        fn, why = pieces.load_piece(name)
        rows.append({"piece": name, "lesson": lesson, "in the capstone": role,
                     "runs": "yours" if fn is not None else f"the course's ({why})"})
    return rows
