"""Which earlier cells an exercise needs: a name-based slice of the notebook.

Grading runs each exercise in a fresh kernel. Rather than re-running the whole lesson (figures,
measurements) before every exercise, the grader runs only the cells the exercise depends on: for each
name the exercise and its check read, the latest earlier cell that binds it, and so on transitively.

A cell *binds* a name by assigning, importing, defining or mutating it at top level
(``x = ...``, ``import numpy as np``, ``def f``, ``x[0] = ...``, ``x.attr = ...``, ``x += ...``).
A cell *reads* every module-level name it loads: at top level, and the globals of its function
bodies (a function reads them when called), found with :mod:`symtable`. A name bound earlier in the
same cell still counts as read, which over-approximates: the safe direction; except what a reader binds *first*:
a name the cell binds unconditionally at top level (``import``, ``def``, ``class``, ``x = ...``) before any of
its code mentions it needs no earlier binding (:func:`bound_first`), so two exercise cells that both
``import numpy as np`` do not depend on each other. And a re-import is no dependency either: a name the latest
binder only imports again, as an earlier cell did (:func:`reimports`), is taken from the latest such cell that is
not a learner's. Cells that cannot be analysed (``from m import *``, code that does not parse) are always included.
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


@lru_cache(maxsize=4096)
def bound_first(source: str) -> frozenset[str]:
    """Names the cell binds itself before anything could read them, so an earlier binding is never used.

    A name counts when a top-level statement that always runs binds it (``import numpy as np``, ``def f``,
    ``class C``, ``x = ...``, ``a, b = ...``) and no code of the cell mentions it before: not at top level, not
    in a function defined earlier (which a call could run), not in that statement's own value, decorators or
    defaults. A binding under ``if``/``for``/``try``/``with`` may not run, and a ``del`` anywhere may unbind
    it: those names still need their earlier binding (the safe direction).
    """
    code = TransformerManager().transform_cell(source)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return frozenset()
    deleted = {t.id for n in ast.walk(tree) if isinstance(n, ast.Delete) for t in n.targets
               if isinstance(t, ast.Name)}
    mentioned: set[str] = set()
    first: set[str] = set()
    for stmt in tree.body:
        binds, evaluated = _plain_binding(stmt)
        first |= {name for name in binds if name not in mentioned and name not in _mentions(evaluated)}
        mentioned |= _mentions([stmt])
    return frozenset(first - deleted)


def _plain_binding(stmt: ast.stmt) -> tuple[set[str], list[ast.AST]]:
    """(names an always-running top-level statement binds, the parts of it evaluated before they are bound)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        if any(alias.name == "*" for alias in stmt.names):
            return set(), []
        return {alias.asname or alias.name.split(".")[0] for alias in stmt.names}, []
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):  # the body runs when called, once bound
        args = stmt.args
        evaluated = [*stmt.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
        annotations = [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                               args.vararg, args.kwarg) if a is not None and a.annotation]
        return {stmt.name}, [*evaluated, *annotations, *([stmt.returns] if stmt.returns else [])]
    if isinstance(stmt, ast.ClassDef):  # the class body runs at once, its methods' bodies when called
        body = [s for s in stmt.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
        methods = [_plain_binding(s)[1] for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return {stmt.name}, [*stmt.decorator_list, *stmt.bases, *stmt.keywords, *body, *sum(methods, [])]
    if isinstance(stmt, ast.Assign) and all(_names_only(t) for t in stmt.targets):
        return set().union(*(_target_names(t) for t in stmt.targets)), [stmt.value]
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
        return {stmt.target.id}, [stmt.value, stmt.annotation]
    return set(), []


def _names_only(target: ast.AST) -> bool:
    """Whether an assignment target only binds names (``a``, ``a, *b``), mutating nothing (``a[0]``, ``a.b``)."""
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(t) for t in target.elts)
    return isinstance(target, ast.Starred) and _names_only(target.value)


def _mentions(nodes: list[ast.AST]) -> set[str]:
    """Every name these nodes mention, in any role and at any depth (function bodies, ``global`` lines too)."""
    found: set[str] = set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                found.add(n.id)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                found |= set(n.names)
    return found


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

    ``sources`` are the code cells of a notebook in order. ``readers`` run in this order after them; a name a
    reader binds first (:func:`bound_first`) is not looked up for it, nor for the readers after it. Cells in
    ``trusted_binders_only`` are never included just for being opaque (a learner's broken cell must not be
    dragged into the context of every later exercise); they still come in when they bind a needed name.
    """
    names = [cell_names(s) for s in sources[:before]]
    own = [names[i].reads - bound_first(sources[i]) for i in range(before)]  # what each needs from before it
    chosen = {i for i in range(before) if names[i].opaque and i not in trusted_binders_only}
    pending: set[str] = set().union(*(own[i] for i in chosen))
    bound: set[str] = set()
    for reader in readers:
        bound |= bound_first(reader)
        pending |= cell_names(reader).reads - bound
    seen: set[tuple[str, int]] = set()
    work = [(name, before) for name in pending]
    while work:
        name, limit = work.pop()
        if (name, limit) in seen:
            continue
        seen.add((name, limit))
        binder = _binder(sources, names, name, limit, trusted_binders_only)
        if binder is not None and binder not in chosen:
            # The binder's own reads come from cells before it; ``x += 1`` reads x, which pulls in
            # the earlier ``x = ...`` as well.
            chosen.add(binder)
            work.extend((n, binder) for n in own[binder])
    return sorted(chosen)


def _binder(sources: list[str], names: list[CellNames], name: str, limit: int, learner: frozenset[int]) -> int | None:
    """The latest cell before ``limit`` that binds ``name``; but when it only re-imports what an earlier cell
    imported the same way (``import numpy as np`` twice), the latest of those cells that is not a learner's."""
    chain: list[int] = []
    for i in range(limit - 1, -1, -1):
        if name not in names[i].binds:
            continue
        if chain and reimports(sources[i]).get(name) != reimports(sources[chain[0]]).get(name):
            break
        chain.append(i)
        if reimports(sources[i]).get(name) is None:
            break
    return next((i for i in chain if i not in learner), chain[0] if chain else None)


@lru_cache(maxsize=4096)
def reimports(source: str) -> dict[str, str]:
    """Names the cell binds only by unconditional top-level imports, all of one kind: name -> that import
    (``{"np": "import numpy"}``). Importing a module again gives the same object, so any such cell will do."""
    code = TransformerManager().transform_cell(source)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {}
    kinds: dict[str, set[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if isinstance(stmt, ast.Import):
                    kind = f"import {alias.name if alias.asname else alias.name.split('.')[0]}"
                else:
                    kind = f"from {'.' * stmt.level}{stmt.module or ''} import {alias.name}"
                kinds.setdefault(alias.asname or alias.name.split(".")[0], set()).add(kind)
    others, _ = _top_level_binds([s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))])
    others |= {n.target.id for n in ast.walk(tree) if isinstance(n, ast.NamedExpr)}
    return {name: kind.pop() for name, kind in kinds.items() if len(kind) == 1 and name not in others}
