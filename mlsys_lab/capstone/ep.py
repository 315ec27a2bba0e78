"""Expert parallelism of the capstone's MoE model over real MPI ranks, on the learner's ``ep_dispatch`` (lesson 11).

p ranks, E experts; rank r owns the experts r·E/p … (r+1)·E/p − 1. What lives where:

* **replicated**: embeddings, attention, layer norms, every block's router, the head. The same on every rank; their
  gradients are averaged over the ranks by ``average_gradients``, as in the data-parallel run;
* **sharded**: the experts' weights (``moe.fc.w/b``, ``moe.out.w/b`` of every block), on their owner only. The
  other ranks' slices of θ hold NaN: a rank that read an expert it does not own would turn its loss into NaN.

Every rank trains on its own shard of the global batch (:func:`~mlsys_lab.capstone.text.shard_rows`). One MoE
block on rank r (:class:`ExpertParallelMoe`), **forward**:

1. route its own N_r tokens as one routing group (:func:`~mlsys_lab.capstone.moe._route_group`: the learner's
   ``route_with_capacity`` and ``top_k_gate``, the group's own capacity); the kept (token, expert) pairs, in
   token order, are what travels;
2. all-gather every rank's pairs' expert ids: metadata (8 bytes a pair) that a real implementation exchanges too;
3. dispatch the pairs' rows h_t to the experts' owners: the learner's ``ep_dispatch`` on an :class:`MpiAllToAll`,
   one all-to-all; ``out[r][e]`` holds the rows for its expert e, by source rank, then token;
4. run its own experts on them;
5. send the outputs back with the reverse all-to-all (the course's :func:`mlsys_lab.moe.mpi_dispatch.alltoallv`):
   from the metadata the owner knows how many rows of each expert came from each source, so it cuts them back
   into one block per source; a source receives its rows in its pairs' stable order by expert and puts them back;
6. combine: y_t = Σ_e gate[t, e] · E_e(h_t), expert by expert (the order the one-process block adds them in).

The **backward** is the mirror image. dgate[t, e] = dy_t · E_e(h_t) is local (the outputs came back); the rows
gate[t, e] · dy_t are dispatched to the owners by ``ep_dispatch`` again (the same routing: the forward's layout);
each owner runs its experts' backward and returns the input gradients' rows by the reverse all-to-all; the router's
backward is local. A rank's rows carry the gradient of *its own* mean loss (÷ N_i), so the owner weights the rows
of source i by N_i / N before its experts' weight gradients sum them: the gradient of the global batch's mean loss,
which ``average_gradients`` gives the replicated parameters (Σ_i N_i · g_i / N). The run is then the one-process run
of the same model with ``routing_groups`` = p (:mod:`.moe`), up to summation order.

**The learner's global view on a real rank.** ``ep_dispatch(tokens, experts, E, p, group)`` is written for one
process holding every rank's rows. On rank r it gets every rank's ``experts`` (the metadata), its own rows at index r
and zeros of the right shapes elsewhere. :class:`MpiAllToAll` sends only ``send[r][·]`` over MPI and returns the
real ``recv[r][·]``, the other entries being the placeholder pieces as given: the lesson's check proved that out[j]
is built from recv[j] and the metadata alone, so out[r] is real. The group refuses a second ``all_to_all`` and rows
that are not exactly the pairs due to each rank (the lesson's budget). :func:`checked_dispatch` runs the piece on
simulated ranks (:class:`LocalAllToAll`) against the course's first, so that a broken one is named before any rank
starts.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from mlsys_lab.capstone.model import GPTConfig, ModelOps, _gelu_and_grad
from mlsys_lab.capstone.moe import _route_group, _router_backward
from mlsys_lab.capstone.train import RunConfig
from mlsys_lab.moe.dispatch import expert_dispatch
from mlsys_lab.moe.mpi_dispatch import alltoallv
from mlsys_lab.parallelism import comm as simulated
from mlsys_lab.validation import check_divides, check_int, check_sequence, check_type

EXPERT_PARAMS = ("moe.fc.w", "moe.fc.b", "moe.out.w", "moe.out.b")  # per block: sharded over ranks by expert
# checked_dispatch's simulated cases: (p, E, rows on each rank); one rank sends nothing, one expert gets nothing
CHECK_CASES = ((2, 4, (6, 3)), (2, 2, (5, 0)), (2, 6, (4, 9)))


def check_expert_parallel(config: RunConfig, n_ranks: int) -> RunConfig:
    """``config`` if its model can train expert-parallel on ``n_ranks`` ranks, else a ValueError saying why: a
    mixture of experts, ``n_ranks`` dividing its experts and at most the batch's sequences, and ``routing_groups``
    equal to ``n_ranks`` (each rank's shard is one routing group: the one-process run of the same config is then
    the same computation)."""
    model = check_type("config", config, RunConfig).model
    if model.moe is None:
        raise ValueError("config.model.moe must be a MoeConfig: expert parallelism shards a model's experts")
    check_int("n_ranks", n_ranks, low=1, high=min(64, config.batch_size))
    check_divides("n_ranks", n_ranks, of_name="config.model.moe.n_experts", of_value=model.moe.n_experts)
    if model.moe.routing_groups != n_ranks:
        raise ValueError(f"config.model.moe.routing_groups must be n_ranks={n_ranks} (each rank routes its own shard "
                         f"as one group); got {model.moe.routing_groups}")
    return config


def sharded_names(config: GPTConfig) -> list[str]:
    """The parameters expert parallelism shards over the ranks, by expert: every block's experts."""
    check_type("config", config, GPTConfig)
    return [f"h{layer}.{name}" for layer in range(config.n_layers) for name in EXPERT_PARAMS] if config.moe else []


def _rows_problem(sent, due, rank: int) -> str | None:
    """What is wrong with the rows ``rank`` sent each rank (``sent[j]``), against the pairs due to it."""
    for j, (have, want) in enumerate(zip(sent, due, strict=True)):
        if have != want:
            return (f"made rank {rank} send rank {j} {have} rows; exactly its {want} (token, expert) rows for rank "
                    f"{j}'s experts are due (one all-to-all, nothing replicated)")
    return None


def _pieces(send, n_ranks: int) -> list[list[np.ndarray]]:
    """``send`` as p lists of p 2-D arrays, or a ValueError naming ep_dispatch."""
    ok = isinstance(send, (list, tuple)) and len(send) == n_ranks and all(
        isinstance(row, (list, tuple)) and len(row) == n_ranks for row in send)
    if not ok:
        raise ValueError(f"ep_dispatch must call all_to_all(send) with send[i][j] what rank i sends rank j: {n_ranks} "
                         f"lists of {n_ranks} arrays; got {type(send).__name__}")
    pieces = [[np.asarray(piece) for piece in row] for row in send]
    if any(piece.ndim != 2 for row in pieces for piece in row):
        raise ValueError("ep_dispatch must send (rows, d) arrays in all_to_all: one row per (token, expert) pair")
    return pieces


class LocalAllToAll:
    """``n_ranks`` simulated ranks in this process: ``all_to_all(send)`` returns ``recv[j][i] = send[i][j]`` (lesson
    08's :func:`~mlsys_lab.parallelism.comm.all_to_all`), keeping the calls and the rows each rank sent each other
    rank in the first one (``rows[i, j]``). Where :func:`checked_dispatch` runs a dispatch."""

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks, self.calls, self.rows = check_int("n_ranks", n_ranks, low=1, high=64), 0, None

    def all_to_all(self, send) -> list:
        pieces = _pieces(send, self.n_ranks)
        self.calls += 1
        if self.rows is None:
            self.rows = np.array([[len(piece) for piece in row] for row in pieces])
        return simulated.all_to_all(pieces)


def _dispatch_problem(got, expected: list, group: LocalAllToAll, experts: list, per: int) -> str | None:
    if group.calls != 1:
        return f"made {group.calls} all_to_all calls; the budget is one per dispatch"
    p = group.n_ranks
    for i in range(p):
        problem = _rows_problem(group.rows[i], [int(np.sum(experts[i] // per == j)) for j in range(p)], i)
        if problem:
            return problem
    if not isinstance(got, (list, tuple)) or len(got) != p or any(
            not isinstance(out, (list, tuple)) or len(out) != per for out in got):
        return f"must return p = {p} lists (one per rank) of E/p = {per} arrays (one per local expert)"
    for j in range(p):
        for e in range(per):
            have, want = np.asarray(got[j][e]), expected[j][e]
            if have.shape != want.shape:
                return (f"gave rank {j}'s local expert {e} (global {j * per + e}) {have.shape[0] if have.ndim else 0} "
                        f"rows; {want.shape[0]} are routed to it")
            if not np.array_equal(have, want):
                return (f"gave rank {j}'s local expert {e} (global {j * per + e}) the rows of another expert or in "
                        "another order (they go by source rank, then token)")
    return None


def checked_dispatch(dispatch: Callable) -> None:
    """Run ``dispatch`` (an ``ep_dispatch``: yours, or the course's) on the simulated ranks of :data:`CHECK_CASES`
    and compare with the course's :func:`~mlsys_lab.moe.dispatch.expert_dispatch`: one all-to-all, exactly the rows
    due to each rank, each expert's rows in order. A ValueError names the piece and what is wrong; the launcher
    calls it before ``mpiexec``."""
    if not callable(dispatch):
        raise TypeError(f"dispatch must be a function ep_dispatch(tokens, experts, n_experts, n_ranks, group); got "
                        f"{type(dispatch).__name__}")
    g = np.random.default_rng(0)
    whose = "the course's" if dispatch is expert_dispatch else "your"
    for p, n_experts, counts in CHECK_CASES:
        tokens = [np.round(g.normal(size=(n, 3)), 3) + 10 * i for i, n in enumerate(counts)]
        experts = [g.integers(0, n_experts, size=n) for n in counts]
        expected = expert_dispatch(tokens, experts, n_experts, p, LocalAllToAll(p))
        group = LocalAllToAll(p)
        got = dispatch([t.copy() for t in tokens], [e.copy() for e in experts], n_experts, p, group)
        problem = _dispatch_problem(got, expected, group, experts, n_experts // p)
        if problem:
            raise ValueError(f"{whose} ep_dispatch cannot run on the ranks (p={p}, E={n_experts}, rows per rank "
                             f"{list(counts)}): it {problem}")


class MpiAllToAll:
    """The ``group`` of a global-view ``ep_dispatch`` on a real rank: ``all_to_all(send)`` sends this rank's row of
    ``send`` over MPI (the course's :func:`~mlsys_lab.moe.mpi_dispatch.alltoallv`) and returns ``recv`` whose
    ``recv[rank][i]`` is what rank i really sent; the other entries are the (placeholder) pieces of ``send``.

    ``due[i, j]``: the rows rank i must send rank j (from the all-gathered metadata). A second call, or rows that
    are not the ones due, is a ValueError naming ep_dispatch, raised before anything is sent. Keeps the calls, the
    bytes this rank sent to the *other* ranks (its own rows stay) and the seconds in MPI.
    """

    def __init__(self, comm, due: np.ndarray, width: int, dtype) -> None:
        self.comm, self.rank, self.n_ranks = comm, comm.Get_rank(), comm.Get_size()
        self.due, self.width, self.dtype = due, width, np.dtype(dtype)
        self.calls, self.bytes_sent, self.seconds = 0, 0, 0.0

    def all_to_all(self, send) -> list:
        self.calls += 1
        if self.calls > 1:
            raise ValueError("ep_dispatch must call group.all_to_all once per dispatch (the budget); it called it "
                             "again")
        pieces = _pieces(send, self.n_ranks)
        if any(piece.shape[1] != self.width for piece in pieces[self.rank]):
            raise ValueError(f"ep_dispatch must send rows of the tokens' width d={self.width}")
        rows = np.array([len(piece) for piece in pieces[self.rank]], dtype=np.int64)
        problem = _rows_problem(rows, self.due[self.rank], self.rank)
        if problem:
            raise ValueError(f"ep_dispatch {problem}")
        tick = time.perf_counter()
        block = np.concatenate([piece.astype(self.dtype) for piece in pieces[self.rank]])
        received, counts = alltoallv(self.comm, np.ascontiguousarray(block), rows, self.width)
        self.seconds += time.perf_counter() - tick
        self.bytes_sent += int(rows.sum() - rows[self.rank]) * self.width * self.dtype.itemsize
        parts = np.split(received, np.cumsum(counts)[:-1])
        return [[parts[i] if j == self.rank else pieces[i][j].copy() for i in range(self.n_ranks)]
                for j in range(self.n_ranks)]


class ExpertParallelMoe:
    """Every MoE block of the model on this rank, expert-parallel (see the module docstring): ``mlp`` and
    ``mlp_back`` for :func:`~mlsys_lab.capstone.model.loss_and_grad`, in place of the one-process experts.

    ``comm``: the MPI communicator of the p ranks; ``ops``: the pieces (routing, gate, aux loss); ``dispatch``: an
    ``ep_dispatch``; ``rank_tokens``: every rank's token count, N_i. Per step it counts the dispatches' all-to-all
    calls (one each), the payload bytes this rank sent to other ranks (dispatch and return, forward and backward),
    the metadata bytes, the (token, expert) pairs it dropped at capacity, and the seconds in MPI.
    """

    def __init__(self, comm, config: GPTConfig, ops: ModelOps, dispatch: Callable, rank_tokens) -> None:
        self.comm, self.rank, self.n_ranks = comm, comm.Get_rank(), comm.Get_size()
        self.moe = check_type("config", config, GPTConfig).moe
        if self.moe is None:
            raise ValueError("config.moe must be a MoeConfig: expert parallelism shards a model's experts")
        self.ops, self.dispatch = check_type("ops", ops, ModelOps), dispatch
        self.per = self.moe.n_experts // self.n_ranks
        self.first = self.rank * self.per                                   # this rank's first global expert
        tokens = np.array(check_sequence("rank_tokens", rank_tokens, min_size=self.n_ranks, max_size=self.n_ranks))
        self.shares = (tokens / tokens.sum()).astype(config.dtype)          # N_i / N
        self.counts: dict = {}
        self.reset()

    def reset(self) -> dict:
        """The counts since the last reset (see the class docstring), and a fresh start."""
        counts, self.counts = self.counts, {"calls": [], "alltoall_bytes": 0, "metadata_bytes": 0, "dropped": 0,
                                            "pairs": 0, "seconds": 0.0}
        return counts

    def _dispatch(self, rows: np.ndarray, experts: list) -> list[np.ndarray]:
        """``ep_dispatch`` of this rank's pair rows; the rows of each of its experts, by source rank then token."""
        p, width = self.n_ranks, rows.shape[1]
        tokens = [rows if i == self.rank else np.zeros((len(experts[i]), width), dtype=rows.dtype) for i in range(p)]
        due = np.array([[np.count_nonzero(e // self.per == j) for j in range(p)] for e in experts])
        group = MpiAllToAll(self.comm, due, width, rows.dtype)
        out = self.dispatch(tokens, [e.copy() for e in experts], self.moe.n_experts, p, group)
        self.counts["calls"].append(group.calls)
        self.counts["alltoall_bytes"] += group.bytes_sent
        self.counts["seconds"] += group.seconds
        if group.calls != 1:
            raise ValueError(f"ep_dispatch must call group.all_to_all exactly once per dispatch; it called it "
                             f"{group.calls} times")
        mine = out[self.rank] if isinstance(out, (list, tuple)) and len(out) == p else None
        if not isinstance(mine, (list, tuple)) or len(mine) != self.per:
            raise ValueError(f"ep_dispatch must return p = {p} lists of E/p = {self.per} arrays")
        received = []
        for e, rows_e in enumerate(mine):
            want = int(sum(np.count_nonzero(ids == self.first + e) for ids in experts))
            rows_e = np.asarray(rows_e, dtype=rows.dtype)
            if rows_e.shape != (want, width):
                raise ValueError(f"ep_dispatch gave rank {self.rank}'s local expert {e} (global {self.first + e}) "
                                 f"rows of shape {rows_e.shape}; ({want}, {width}) are routed to it")
            received.append(rows_e)
        return received

    def _return(self, outputs: list[np.ndarray], counts: np.ndarray, order: np.ndarray) -> np.ndarray:
        """The reverse all-to-all: the rows this rank's experts computed (``outputs[e]``, by source then token), back
        to their sources; this rank's own pairs' rows come back, put in pair order (``order``: the stable argsort
        of its pairs' experts, the order the owners' blocks arrive in). ``counts[i, e]``: rows of source i."""
        width = outputs[0].shape[1]
        starts = np.cumsum(counts, axis=0) - counts                         # where source i's rows of e begin
        blocks = [outputs[e][starts[i, e]:starts[i, e] + counts[i, e]] for i in range(self.n_ranks)
                  for e in range(self.per)]
        sizes = counts.sum(axis=1).astype(np.int64)
        tick = time.perf_counter()
        received, _ = alltoallv(self.comm, np.ascontiguousarray(np.concatenate(blocks)), sizes, width)
        self.counts["seconds"] += time.perf_counter() - tick
        self.counts["alltoall_bytes"] += int(sizes.sum() - sizes[self.rank]) * width * outputs[0].itemsize
        back = np.empty_like(received)
        back[order] = received
        return back

    def mlp(self, h2: np.ndarray, w: dict, p: str, adapters=None):
        """The MoE MLP of block ``p`` on this rank's tokens h2 (B_r, T, C): (y, the cache of :meth:`mlp_back`)."""
        if adapters is not None:
            raise ValueError("adapters must be None: expert parallelism trains the experts themselves (no LoRA)")
        h = h2.reshape(-1, h2.shape[-1])
        logits = h @ w[p + "router.w"]
        indices, kept, gates, balance = _route_group(logits, self.moe, self.ops.route_with_capacity,
                                                     self.ops.top_k_gate, self.ops.aux_loss, h.dtype)
        tokens, choices = np.nonzero(kept)                                  # kept pairs, in token order
        pairs = indices[tokens, choices].astype(np.int64)
        experts = self.comm.allgather(pairs)                                # every rank's pairs' experts
        self.counts["metadata_bytes"] += pairs.nbytes * (self.n_ranks - 1)
        self.counts["dropped"] += int(kept.size - len(pairs))
        self.counts["pairs"] += int(kept.size)
        ran = []
        for e, x_e in enumerate(self._dispatch(h[tokens], experts)):
            g = self.first + e
            a, da_du = _gelu_and_grad(x_e @ w[p + "moe.fc.w"][g] + w[p + "moe.fc.b"][g])
            ran.append((x_e, a, da_du, a @ w[p + "moe.out.w"][g] + w[p + "moe.out.b"][g]))
        # counts[i, e]: rows source i sent this rank's expert e (its rows come i by i: ep_dispatch's order)
        counts = np.array([[np.count_nonzero(ids == self.first + e) for e in range(self.per)] for ids in experts])
        order = np.argsort(pairs, kind="stable")
        back = self._return([y_e for *_, y_e in ran], counts, order)        # E_e(h_t) of this rank's pairs
        y = np.zeros_like(h)
        for e in range(self.moe.n_experts):
            sel = pairs == e
            y[tokens[sel]] += gates[tokens[sel], e, None] * back[sel]
        cache = (h, logits, indices, kept, gates, tokens, pairs, experts, counts, order, ran, back, balance)
        return y.reshape(h2.shape), cache  # the cache ends with balance: the model adds α · aux from it

    def mlp_back(self, dy: np.ndarray, cache, w: dict, g: dict, p: str, adapters=None, tuned=None) -> np.ndarray:
        """dL/dh2 of :meth:`mlp` from dL/dy; fills the router's gradient (this rank's loss, averaged later) and this
        rank's experts' (the global batch's mean loss: the rows of source i weighted by N_i / N)."""
        h, logits, indices, kept, gates, tokens, pairs, experts, counts, order, ran, back, balance = cache
        shape, dy = dy.shape, dy.reshape(-1, dy.shape[-1])
        dgates = np.zeros_like(gates)
        dgates[tokens, pairs] = (dy[tokens] * back).sum(axis=1)
        dx = []
        for e, dout in enumerate(self._dispatch(gates[tokens, pairs][:, None] * dy[tokens], experts)):
            (x_e, a, da_du, _), ge = ran[e], self.first + e
            du = (dout @ w[p + "moe.out.w"][ge].T) * da_du
            share = np.repeat(self.shares, counts[:, e])[:, None]           # N_i / N of each row's source
            g[p + "moe.out.w"][ge] = a.T @ (share * dout)
            g[p + "moe.out.b"][ge] = (share * dout).sum(axis=0)
            g[p + "moe.fc.w"][ge] = x_e.T @ (share * du)
            g[p + "moe.fc.b"][ge] = (share * du).sum(axis=0)
            dx.append(du @ w[p + "moe.fc.w"][ge].T)
        returned = self._return(dx, counts, order)
        dh = np.zeros_like(h)
        for e in range(self.moe.n_experts):
            sel = pairs == e
            dh[tokens[sel]] += returned[sel]
        return (dh + _router_backward(dgates, h, logits, indices, kept, balance, w, g, p)).reshape(shape)
