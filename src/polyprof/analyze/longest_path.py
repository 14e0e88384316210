"""The longest path through a dependency graph (``analyze/depgraph.py``) and the slack of
every edge: one pass forward and one backward over the nodes in topological order.

Ties go as networkx's ``dag_longest_path`` (HTA's) breaks them: a node takes the first
inserted of its best incoming edges, a path starts afresh where the best is negative, and
it ends at the first node in topological order with the greatest length.
"""

from __future__ import annotations


import logging

import numpy as np

from ..errors import PolyprofError
from ..trace.sorting import lexsort
from .depgraph import DepGraph
from .nesting import parents
from ..lowlevel.compiled import optional

log = logging.getLogger("polyprof")

_longest = optional(__package__, "_longest")  # the Python passes otherwise (lowlevel/compiled.py)
#: "c" (``_longest.c``) or "python": which passes are in use
IMPLEMENTATION = "c" if _longest is not None else "python"


class LongestPath:  # a plain class: a NamedTuple's fields are type-checked at every start (docs/benchmarks.md)
    """The longest path of a graph, and per edge and node the longest through, to and from it."""

    __slots__ = ("nodes", "edges", "length", "through", "fwd", "bwd")
    nodes: np.ndarray  # node ids along the path, first to last
    edges: np.ndarray  # edge indices along it, first to last
    length: int  # ns: the sum of its edges' weights
    through: np.ndarray  # per edge, the longest path that runs through it (ns)
    fwd: np.ndarray  # per node, the longest path that ends there (ns)
    bwd: np.ndarray  # per node, the longest path that starts there (ns)

    def __init__(self, nodes: np.ndarray, edges: np.ndarray, length: int, through: np.ndarray, fwd: np.ndarray,
                 bwd: np.ndarray):
        self.nodes, self.edges, self.length, self.through, self.fwd, self.bwd = nodes, edges, length, through, fwd, bwd


def topological_order(g: DepGraph, outs: np.ndarray | None = None,
                      grouped: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Nodes in an order every edge runs forward in: by time (ends before starts at one
    instant, device ends first, deeper ends first...), else by Kahn's walk. ``outs``: the
    edges in stable order of their source, where the caller has them already;
    ``grouped``: (``o_ptr``, ``outs``, in-degrees) likewise (:func:`_csr`)."""
    n = g.n_nodes
    # at one instant: ends (device ones first) before starts (host ones first)
    tie = np.empty(n, np.int64)
    tie[1::2] = np.where(g.device, 0, 1)
    tie[0::2] = np.where(g.device, 3, 2)
    order = lexsort((tie, g.time))
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    if not len(g.src) or bool((pos[g.src] < pos[g.dst]).all()):
        return order
    return _kahn(g, pos, outs=outs, grouped=grouped)


def _kahn(g: DepGraph, pos: np.ndarray, compiled: bool = True, outs: np.ndarray | None = None,
          grouped: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Kahn's walk, taking ready nodes in ``pos`` order (used only where time order and the
    edges disagree: clock skew or ties the time order misplaces); in C where ``_longest``
    is built and ``compiled``, else in Python (the same order). ``grouped``: the edges by
    source and the in-degrees, where the caller has them (:func:`_csr`)."""
    n = g.n_nodes
    if grouped is not None:
        ptr, o, indeg = grouped
        indeg = indeg.copy()  # (consumed by the walk)
    else:
        o = np.argsort(g.src, kind="stable") if outs is None else outs
        ptr = _offsets(g.src, n)
        indeg = np.bincount(g.dst, minlength=n).astype(np.int64)
    out_dst = np.ascontiguousarray(g.dst[o], np.int64)
    if _longest is not None and compiled:
        order = np.empty(n, np.int64)
        order = order[:_longest.kahn(np.ascontiguousarray(pos, np.int64), ptr, out_dst, indeg, order)]
    else:
        order = _kahn_python(pos.tolist(), ptr.tolist(), out_dst.tolist(), indeg.tolist())
    if len(order) != n:
        raise PolyprofError("the dependency graph has a cycle (events overlapping on a thread or stream)")
    log.debug("critical path: %d edges against time order; nodes taken in Kahn's order", int((pos[g.src] >= pos[g.dst]).sum()))
    return order


def _kahn_python(p: list[int], ptr: list[int], out_dst: list[int], indeg: list[int]) -> np.ndarray:
    """``_longest.kahn`` in Python: the nodes placed, in order (fewer than all: a cycle)."""
    import heapq

    heap = [(p[v], v) for v in range(len(indeg)) if indeg[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, v = heapq.heappop(heap)
        order.append(v)
        for d in out_dst[ptr[v]:ptr[v + 1]]:
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(heap, (p[d], d))
    return np.asarray(order, np.int64)


def longest_path(g: DepGraph, compiled: bool = True) -> LongestPath:
    """The longest path of ``g`` (its two passes in C where ``_longest`` is built and
    ``compiled``, else in Python: the same numbers, tests/test_critical_path.py)."""
    n = g.n_nodes
    if not len(g.src):
        z = np.zeros(0, np.int64)
        return LongestPath(z, z, 0, z, np.zeros(n, np.int64), np.zeros(n, np.int64))
    src, dst, w = (np.ascontiguousarray(a, np.int64) for a in (g.src, g.dst, g.weight))
    # incoming edges per node in insertion order, outgoing likewise
    i_ptr, ins, o_ptr, outs = _csr(src, dst, n, compiled)
    order = np.ascontiguousarray(topological_order(g, grouped=(o_ptr, outs, np.diff(i_ptr))), np.int64)
    f, best, b = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64)
    passes = _longest.passes if compiled and _longest is not None else _passes_python
    passes(order, i_ptr, ins, o_ptr, outs, src, dst, w, f, best, b)
    has_edge = np.zeros(n, bool)
    has_edge[g.src] = True
    has_edge[g.dst] = True
    cand = order[has_edge[order]]
    end = int(cand[int(np.argmax(f[cand]))])
    walk = getattr(_longest, "walk", None) if compiled else None  # (an extension built before walk: Python)
    if walk is not None:
        back = np.empty(len(src), np.int64)  # a path has at most one edge of each
        edges = back[:walk(best, src, end, back)][::-1].copy()
    else:
        edges = _walk_python(best, src, end)
    v = int(src[edges[0]]) if len(edges) else end
    nodes = np.concatenate([[v], g.dst[edges]]).astype(np.int64)
    return LongestPath(nodes, edges, int(f[end]), f[g.src] + g.weight + b[g.dst], f, b)


def forest_times(thread: np.ndarray, start: np.ndarray, end: np.ndarray, waits: np.ndarray,
                 nest: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """What :func:`longest_path` and ``critical_path.event_times`` give for a graph of host
    calls alone (``depgraph`` with no device activity or synchronisation record), without
    building it: (per call, its time on the path; its slack; the path's length). Calls of
    positive duration, per ``thread``; ``waits``: the calls whose end the host waits for.

    Such a graph is one chain per thread (the nesting walk), with weights of zero or more:
    the longest path through any of a thread's edges is the thread's whole chain, whose
    length is what its calls own, each its duration less its direct children's (less the
    time from its last child to its end for a waiting call, whose end edge weighs
    nothing). The path is the longest thread's chain. None where that does not decide
    it: calls that do not nest (a child outlasting its parent), or two threads of the
    longest length (ties go by the graph's node order): build the graph there. ``nest``:
    ``nesting.parents`` of the calls, if made already."""
    n = len(start)
    order, _, par = parents(thread, start, end) if nest is None else nest  # par: positions in ``order``
    if len(order) != n or not n:
        return None
    s, e = start[order], end[order]
    has = np.flatnonzero(par >= 0)
    p = par[has]
    if not bool((e[has] <= e[p]).all()):
        return None
    children = np.zeros(n, np.int64)
    np.add.at(children, p, e[has] - s[has])
    last = s.copy()  # its start, or its last child's end (children of one parent are disjoint)
    np.maximum.at(last, p, e[has])
    owned = e - s - children
    w = waits[order]
    owned[w] -= e[w] - last[w]
    th = thread[order]
    firsts = np.flatnonzero(np.r_[True, th[1:] != th[:-1]])
    total = np.add.reduceat(owned, firsts)
    length = int(total.max())
    if int((total == length).sum()) > 1:
        return None
    of = np.repeat(np.arange(len(firsts)), np.diff(np.r_[firsts, n]))  # thread index per position
    on, slack = np.empty(n, np.int64), np.empty(n, np.int64)
    on[order] = np.where(total[of] == length, owned, 0)
    slack[order] = length - total[of]
    return on, slack, length


def _offsets(node: np.ndarray, n: int) -> np.ndarray:
    """Where each node's edges start among the edges sorted by ``node`` (n + 1 offsets)."""
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(node, minlength=n), out=out[1:])
    return out


def _csr(src: np.ndarray, dst: np.ndarray, n: int, compiled: bool = True
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(``i_ptr``, ``ins``, ``o_ptr``, ``outs``): the edges in stable order of their
    destination and where each node's run starts (n + 1 offsets), and the same by source.
    One counting pass each in C (``_longest.csr``) where built and ``compiled``, else two
    stable sorts (the same arrays, tests/test_longest_path_passes.py). ``src`` and ``dst``:
    int64, C-contiguous."""
    group = getattr(_longest, "csr", None) if compiled else None  # (an extension built before csr: NumPy)
    if group is not None:
        i_ptr, o_ptr = np.empty(n + 1, np.int64), np.empty(n + 1, np.int64)
        ins, outs = np.empty(len(src), np.int64), np.empty(len(src), np.int64)
        group(src, dst, i_ptr, ins, o_ptr, outs)
        return i_ptr, ins, o_ptr, outs
    ins = np.argsort(dst, kind="stable").astype(np.int64, copy=False)
    outs = np.argsort(src, kind="stable").astype(np.int64, copy=False)
    return _offsets(dst, n), ins, _offsets(src, n), outs


def _walk_python(best: np.ndarray, src: np.ndarray, end: int) -> np.ndarray:
    """The path's edges, first to last, back from ``end`` along ``best`` (``_longest.walk``
    in Python)."""
    path_e = []
    best_of, src_of = best.item, src.item  # the path's own nodes only (a whole column's tolist cost more)
    v = end
    while (e := best_of(v)) >= 0:
        path_e.append(e)
        v = src_of(e)
    return np.asarray(path_e[::-1], np.int64)


def _passes_python(order: np.ndarray, i_ptr: np.ndarray, ins: np.ndarray, o_ptr: np.ndarray, outs: np.ndarray,
                   src: np.ndarray, dst: np.ndarray, w: np.ndarray, fwd_out: np.ndarray, best_out: np.ndarray,
                   bwd_out: np.ndarray) -> None:
    """The forward and backward passes (``_longest.c`` in Python): ``fwd_out``,
    ``best_out`` and ``bwd_out`` filled in place."""
    n = len(order)
    s, d, wl = src.tolist(), dst.tolist(), w.tolist()
    ip, il, op, ol = i_ptr.tolist(), ins.tolist(), o_ptr.tolist(), outs.tolist()
    fwd = [0] * n
    best = [-1] * n
    for v in order.tolist():
        lo, hi = ip[v], ip[v + 1]
        if lo == hi:
            continue
        be = il[lo]
        b = fwd[s[be]] + wl[be]
        for e in il[lo + 1:hi]:  # the first inserted of the best wins (strictly greater)
            c = fwd[s[e]] + wl[e]
            if c > b:
                b, be = c, e
        if b >= 0:
            fwd[v], best[v] = b, be
    bwd = [0] * n
    for u in order[::-1].tolist():
        lo, hi = op[u], op[u + 1]
        if lo == hi:
            continue
        b = 0
        for e in ol[lo:hi]:
            c = wl[e] + bwd[d[e]]
            if c > b:
                b = c
        bwd[u] = b
    fwd_out[:] = fwd
    best_out[:] = best
    bwd_out[:] = bwd
