"""Expert-parallel dispatch in the global view: every rank's (token, expert) rows to the rank that owns the expert.

p ranks hold E experts in blocks: rank j owns the global experts j·E/p … (j+1)·E/p − 1 (GShard's layout, and the
one :mod:`.mpi_dispatch` runs over real processes). Rank i holds ``tokens[i]`` (n_i, d), one row per routed
(token, expert) pair, and ``experts[i]`` (n_i,), the global expert each row goes to. One all-to-all moves them all:

1. each rank sorts its rows by expert with a *stable* sort (rows of one expert keep their token order) and cuts
   them into p pieces, piece j holding the rows for rank j's experts (expert // (E/p) == j);
2. ``group.all_to_all(send)``, with ``send[i][j]`` what rank i sends rank j, returns ``recv`` with
   ``recv[j][i] = send[i][j]``: each rank receives exactly the rows its experts run, nothing replicated;
3. rank j concatenates what it received in source order and splits it by its local experts. The labels travel as
   metadata, not in the payload: rank j knows which expert each received row is for from ``experts`` (a real
   implementation exchanges these counts first, as :func:`.mpi_dispatch.alltoallv` does).

``out[j][e]`` holds the rows for global expert j·E/p + e, ordered by source rank, then by the source's row order.
This is lesson 11's exercise ``ep_dispatch``; the capstone runs it (yours or this one) on real MPI ranks
(:mod:`mlsys_lab.capstone.ep`), and the combine is the same exchange run backwards.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_divides, check_index_array, check_int, check_sequence


def _checked(tokens, experts, n_experts: int, n_ranks: int, group) -> tuple[list, list]:
    p = check_int("n_ranks", n_ranks, low=1, high=4096)
    check_divides("n_ranks", p, of_name="n_experts", of_value=check_int("n_experts", n_experts, low=1, high=1 << 16))
    tokens = check_sequence("tokens", tokens, min_size=p, max_size=p)
    experts = check_sequence("experts", experts, min_size=p, max_size=p)
    if not callable(getattr(group, "all_to_all", None)):
        raise TypeError(f"group must be a group of ranks with all_to_all(send); got {type(group).__name__}")
    rows = [check_array("tokens", t, ndim=2, kinds="f", min_size=0) for t in tokens]
    if len({r.shape[1] for r in rows}) > 1:
        raise ValueError(f"tokens must have one width d on every rank; got {[r.shape[1] for r in rows]}")
    ids = []
    for i, (r, e) in enumerate(zip(rows, experts, strict=True)):
        e = check_index_array("experts", check_array("experts", e, ndim=1, kinds="iu", min_size=0), n_experts,
                              of_name="n_experts")
        if len(e) != len(r):
            raise ValueError(f"experts[{i}] must name one expert per row of tokens[{i}] ({len(r)}); got {len(e)}")
        ids.append(e)
    return rows, ids


def expert_dispatch(tokens, experts, n_experts: int, n_ranks: int, group) -> list:
    """The course's ``ep_dispatch``: per rank j, per local expert e, the rows global expert j·E/p + e runs, in one
    ``group.all_to_all`` (see the module docstring). ``tokens[i]`` (n_i, d) float, ``experts[i]`` (n_i,) ids."""
    rows, ids = _checked(tokens, experts, n_experts, n_ranks, group)
    per = n_experts // n_ranks
    send = []
    for i in range(n_ranks):
        order = np.argsort(ids[i], kind="stable")                             # group by expert, keep token order
        send.append([rows[i][order][ids[i][order] // per == j] for j in range(n_ranks)])
    recv = group.all_to_all(send)
    out = []
    for j in range(n_ranks):
        received = np.concatenate(recv[j]) if len(recv[j]) else np.zeros((0, rows[j].shape[1]))
        labels = np.concatenate([np.sort(ids[i][ids[i] // per == j]) for i in range(n_ranks)])
        out.append([received[labels == j * per + e] for e in range(per)])
    return out
