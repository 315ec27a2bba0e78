"""Which earlier cells an exercise needs: a name-based slice of the notebook.

Grading runs each exercise in a fresh kernel. Rather than re-running the whole lesson (figures,
measurements) before every exercise, the grader runs only the cells the exercise depends on: for each
name the exercise and its check read, the latest earlier cell that binds it, and so on transitively.

A cell *binds* a name by assigning, importing, defining or mutating it at top level
(``x = ...``, ``import numpy as np``, ``def f``, ``x[0] = ...``, ``x.attr = ...``, ``x += ...``).
A cell *reads* every module-level name it loads: at top level, and the globals of its function
bodies (a function reads them when called), found with :mod:`symtable`. A name bound earlier in the
same cell still counts as read, which over-approximates: the safe direction. Cells that cannot be
analysed (``from m import *``, code that does not parse) are always included.
"""

from __future__ import annotations

import ast
import builtins
import symtable
from dataclasses import dataclass
from functools import lru_cache

from IPython.core.inputtransformer2 import TransformerManager

BUILTIN_NAMES = frozenset(dir(builtins)) | {"get_ipython", "display", "__file__"}


@dataclass(frozen=True)
class CellNames:
    binds: frozenset[str]
    reads: frozenset[str]
    opaque: bool  # cannot be analysed: include it whenever it comes before what we need


def _target_names(target: ast.AST) -> set[str]:
    """Names bound or mutated by an assignment target (``a``, ``a, b``, ``a[i]``, ``a.b.c``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return _target_names(target.value)
    return set()


def _top_level_binds(body: list[ast.stmt]) -> tuple[set[str], bool]:
    """Names bound at module scope by these statements (descending into if/for/with/try, not defs)."""
    names: set[str] = set()
    opaque = False
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    opaque = True
                else:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                names |= _target_names(target)
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            names |= _target_names(stmt.target)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            names |= _target_names(stmt.target)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    names |= _target_names(item.optional_vars)
        elif isinstance(stmt, ast.Try):
            for handler in stmt.handlers:
                if handler.name:
                    names.add(handler.name)
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field, None)
            if inner and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner_names, inner_opaque = _top_level_binds(
                    [s for h in inner for s in (h.body if isinstance(h, ast.ExceptHandler) else [h])])
                names |= inner_names
                opaque |= inner_opaque
    return names, opaque


@lru_cache(maxsize=4096)
def cell_names(source: str) -> CellNames:
    """What a code cell binds and reads (IPython magics are translated to Python first)."""
    code = TransformerManager().transform_cell(source)
    try:
        tree = ast.parse(code)
        table = symtable.symtable(code, "<cell>", "exec")
    except SyntaxError:
        return CellNames(frozenset(), frozenset(), opaque=True)
    binds, opaque = _top_level_binds(tree.body)
    binds |= {n.target.id for n in ast.walk(tree) if isinstance(n, ast.NamedExpr)}
    # ``x += 1`` reads x too, though its target is stored: at top level, or in a function that declares x
    # global. Elsewhere x is the function's own local (``scale *= 2`` in a learner's function needs no cell).
    declared = {name for n in ast.walk(tree) if isinstance(n, ast.Global) for name in n.names}
    augmented = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    top_level = {n.target.id for n in _outside_functions(tree)
                 if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    reads = _global_reads(table) | top_level | (augmented & declared)
    return CellNames(frozenset(binds), frozenset(reads - BUILTIN_NAMES), opaque)


def _outside_functions(tree: ast.AST):
    """Every node of ``tree`` except those inside a function, lambda or class body."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _global_reads(table: symtable.SymbolTable) -> set[str]:
    """Module-level names a cell reads: at top level, or as globals inside its functions and classes.

    A function's parameters and locals are not reads (``def f(n): return n`` does not need a global n).
    """
    top = table.get_type() == "module"
    reads = {s.get_name() for s in table.get_symbols()
             if s.is_referenced() and (top or s.is_global())}
    for child in table.get_children():
        reads |= _global_reads(child)
    return reads


def needed_cells(sources: list[str], before: int, readers: list[str],
                 trusted_binders_only: frozenset[int] = frozenset()) -> list[int]:
    """Indices of the cells among ``sources[:before]`` that code ``readers`` depends on, in order.

    ``sources`` are the code cells of a notebook in order. Cells in ``trusted_binders_only`` are
    never included just for being opaque (a learner's broken cell must not be dragged into the
    context of every later exercise); they still come in when they bind a needed name.
    """
    names = [cell_names(s) for s in sources[:before]]
    chosen = {i for i in range(before) if names[i].opaque and i not in trusted_binders_only}
    pending = set().union(*(cell_names(r).reads for r in readers), *(names[i].reads for i in chosen))
    seen: set[tuple[str, int]] = set()
    work = [(name, before) for name in pending]
    while work:
        name, limit = work.pop()
        if (name, limit) in seen:
            continue
        seen.add((name, limit))
        binder = next((i for i in range(limit - 1, -1, -1) if name in names[i].binds), None)
        if binder is not None and binder not in chosen:
            # The binder's own reads come from cells before it; ``x += 1`` reads x, which pulls in
            # the earlier ``x = ...`` as well.
            chosen.add(binder)
            work.extend((n, binder) for n in names[binder].reads)
    return sorted(chosen)
