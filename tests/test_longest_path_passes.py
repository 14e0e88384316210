"""The longest path's two passes: ``analyze/_longest.c`` against the Python loops it
replaces (``longest_path._passes_python``), on the dependency graphs of real traces and on
random graphs with ties and negative weights; and its checks of bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze import longest_path as lp
from polyprof.analyze.critical_path import step_windows

DATA = Path(__file__).parent / "data"
TRACES = [DATA / "traces" / "xspace" / "tpu_inference_2.xplane.pb",
          DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb",
          DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz",
          DATA / "traces" / "kineto" / "cuda_event_sync_multistream.json.gz"]

needs_c = pytest.mark.skipif(lp._longest is None, reason="polyprof.analyze._longest is not built")


def _same(a: lp.LongestPath, b: lp.LongestPath) -> None:
    assert a.length == b.length
    for f in ("nodes", "edges", "through", "fwd", "bwd"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


@needs_c
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_compiled_equals_python_on_real_graphs(path):
    t = polyprof.load(path)
    _, starts, ends = step_windows(t)
    g = depgraph.build(t, int(starts[0]), int(ends[0]))
    assert len(g.src) > 50
    c, p = lp.longest_path(g, compiled=True), lp.longest_path(g, compiled=False)
    _same(c, p)
    assert c.length > 0 and len(c.edges)


def _random_inputs(rng: np.random.Generator, n: int, m: int) -> list[np.ndarray]:
    """A DAG over n nodes (edges from lower to higher positions of a random order), with
    repeated weights (ties) and some negative ones, in the layout ``passes`` takes."""
    order = rng.permutation(n).astype(np.int64)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    lo, hi = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    src, dst = order[lo], order[hi]
    w = rng.choice(np.array([-5, 0, 3, 3, 7, 10], np.int64), len(src))
    ins = np.argsort(dst, kind="stable")
    outs = np.argsort(src, kind="stable")
    i_ptr = np.searchsorted(dst[ins], np.arange(n + 1)).astype(np.int64)
    o_ptr = np.searchsorted(src[outs], np.arange(n + 1)).astype(np.int64)
    return [order, i_ptr, ins.astype(np.int64), o_ptr, outs.astype(np.int64), src, dst, w]


def _outputs(n: int) -> list[np.ndarray]:
    return [np.zeros(n, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64)]


@needs_c
@pytest.mark.parametrize("seed", range(12))
def test_compiled_equals_python_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    args = _random_inputs(rng, n, int(rng.integers(0, 4 * n)))
    c, p = _outputs(n), _outputs(n)
    lp._longest.passes(*args, *c)
    lp._passes_python(*args, *p)
    for name, x, y in zip(("fwd", "best", "bwd"), c, p):
        np.testing.assert_array_equal(x, y, err_msg=name)


@needs_c
def test_bad_input_is_refused_before_writing():
    rng = np.random.default_rng(0)
    args = _random_inputs(rng, 20, 60)
    out = _outputs(20)
    bad = [a.copy() for a in args]
    bad[5][3] = 20  # an edge's source past the last node
    with pytest.raises(ValueError, match="src"):
        lp._longest.passes(*bad, *out)
    bad = [a.copy() for a in args]
    bad[1][5] = bad[1][4] - 1 if bad[1][4] else 99  # pointers going back (or past the edges)
    with pytest.raises(ValueError, match="i_ptr"):
        lp._longest.passes(*bad, *out)
    with pytest.raises(ValueError, match="lengths"):
        lp._longest.passes(*args, *_outputs(19))
    with pytest.raises(TypeError, match="int64"):
        lp._longest.passes(*args[:7], args[7].astype(np.int32), *out)
    with pytest.raises((ValueError, BufferError), match="read-only"):  # read-only outputs
        ro = _outputs(20)
        ro[0].flags.writeable = False
        lp._longest.passes(*args, *ro)
    assert not out[0].any() and (out[1] == -1).all()


@needs_c
def test_kahn_in_c_takes_the_python_walks_order():
    """Kahn's walk (where time order and the edges disagree) in C and in Python: the same
    order on random DAGs whose time order is shuffled, the same error on a cycle."""
    from types import SimpleNamespace

    rng = np.random.default_rng(7)
    for i in range(40):
        n = int(rng.integers(2, 400))
        topo = rng.permutation(n)
        a, b = rng.integers(0, n, (2, int(rng.integers(0, 3 * n))))
        keep = a != b
        lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
        g = SimpleNamespace(n_nodes=n, src=topo[lo].astype(np.int64), dst=topo[hi].astype(np.int64))
        pos = rng.permutation(n).astype(np.int64)
        c, py = lp._kahn(g, pos, True), lp._kahn(g, pos, False)
        assert np.array_equal(c, py), i
    cyc = SimpleNamespace(n_nodes=3, src=np.array([0, 1, 2], np.int64), dst=np.array([1, 2, 0], np.int64))
    for compiled in (True, False):
        with pytest.raises(polyprof.PolyprofError, match="cycle"):
            lp._kahn(cyc, np.arange(3, dtype=np.int64), compiled)


@needs_c
def test_walk_in_c_follows_the_python_walk():
    """``_longest.walk``: the best edges back from a node, as ``_walk_python`` takes them;
    a node or edge out of range, or a chain longer than its output (a cycle), refused."""
    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        src = rng.integers(0, n, n + 20).astype(np.int64)
        edge = rng.permutation(n + 20)[:n]  # node v's own best edge
        best = np.full(n, -1, np.int64)
        for v in range(1, n):  # each node's best edge comes from a lower node: no cycle
            if rng.random() < 0.8:
                src[edge[v]] = int(rng.integers(0, v))
                best[v] = edge[v]
        end = int(rng.integers(0, n))
        want = lp._walk_python(best, src, end)
        out = np.empty(len(src), np.int64)
        k = lp._longest.walk(best, src, end, out)
        assert out[:k][::-1].tolist() == want.tolist()
    with pytest.raises(ValueError, match="node"):
        lp._longest.walk(np.array([-1], np.int64), np.zeros(1, np.int64), 3, np.empty(1, np.int64))
    with pytest.raises(ValueError, match="edge"):
        lp._longest.walk(np.array([5], np.int64), np.zeros(1, np.int64), 0, np.empty(1, np.int64))
    with pytest.raises(ValueError, match="cycle"):  # node 0's best edge comes from node 0
        lp._longest.walk(np.array([0], np.int64), np.zeros(1, np.int64), 0, np.empty(1, np.int64))


@needs_c
def test_csr_in_c_groups_edges_as_the_stable_sorts_do():
    """``_longest.csr`` (one counting pass per side) against ``_csr``'s two stable sorts:
    the same edge order by destination and by source, ties in edge order, and the same
    offsets, on random multigraphs with isolated nodes; bad input refused."""
    rng = np.random.default_rng(11)
    for i in range(40):
        n = int(rng.integers(1, 300))
        m = int(rng.integers(0, 4 * n))
        src, dst = (rng.integers(0, n, m).astype(np.int64) for _ in range(2))
        c, py = lp._csr(src, dst, n, compiled=True), lp._csr(src, dst, n, compiled=False)
        for name, x, y in zip(("i_ptr", "ins", "o_ptr", "outs"), c, py):
            np.testing.assert_array_equal(x, y, err_msg=f"{name} ({i})")
    out = [np.empty(4, np.int64), np.empty(3, np.int64), np.empty(4, np.int64), np.empty(3, np.int64)]
    with pytest.raises(ValueError, match="dst"):
        lp._longest.csr(np.array([0, 1, 2], np.int64), np.array([0, 3, 1], np.int64), *out)
    with pytest.raises(ValueError, match="lengths"):
        lp._longest.csr(np.array([0, 1], np.int64), np.array([0, 1, 2], np.int64), *out)
