"""Point-to-point transfers (issue 28): shown as transfers, never collectives; their bytes
from torch's comms args or shapes; ranks aligned from them by peer and order, with a
bound; an honest headline when they cannot be."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.collectives import COLUMNS, shape_bytes
from polyprof.analyze.frames import frame
from polyprof.ranks.align import align_ranks, alignment_table
from polyprof.report.tables import build

DATA = Path(__file__).parent / "data" / "traces"
GLOO = [DATA / "gloo" / f"gloo_rank{r}.json.gz" for r in (0, 1)]
SAMPLED = [DATA / "kineto" / f"sampled_rank{r}.json.gz" for r in (0, 1)]


def _records(t) -> list[dict]:
    return [dict(zip(t.columns, row)) for row in t.rows()]


@pytest.fixture(scope="module")
def gloo_job():
    return polyprof.load_ranks([str(p) for p in GLOO]).analyze(executor="serial")


def test_gloo_kineto_pair_transfers_with_bytes_and_peers(gloo_job):
    """torch.profiler's own traces of a gloo job (record_shapes): 4 sends of 4,096 bytes
    0 -> 1 and 4 of 2,048 bytes 1 -> 0, each seen at both ends, counted once."""
    rows = {(r["src"], r["dst"]): r for r in _records(gloo_job.tables["transfers"])}
    assert set(rows) == {(0, 1), (1, 0)}
    assert (rows[0, 1]["bytes"], rows[0, 1]["count"], rows[0, 1]["sends"], rows[0, 1]["recvs"]) == (4096, 4, 4, 4)
    assert (rows[1, 0]["bytes"], rows[1, 0]["count"], rows[1, 0]["sends"], rows[1, 0]["recvs"]) == (2048, 4, 4, 4)
    assert rows[0, 1]["total_bytes"] == 4 * 4096
    for r in rows.values():  # gloo's send and recv block their thread: all of it is waiting
        assert r["blocking_ns"] == r["send_ns"] + r["recv_ns"] > 0


def test_collectives_are_only_collectives(gloo_job):
    """The broadcast is the only collective: its bytes from the gloo range's shapes, and
    the straggler tables pair no send with a recv."""
    cs = _records(gloo_job.tables["collective_stats"])
    assert [(c["op"], c["bytes"], c["count"], c["ranks"]) for c in cs] == [("broadcast", 4096, 8, 2)]
    assert set(gloo_job.tables["straggler_collectives"]["op"].tolist()) == {"broadcast"}
    assert all(s["collectives"] == 4 for s in _records(gloo_job.tables["stragglers"]))


def test_a_single_rank_file_shows_its_collectives_and_transfers():
    tables = build(polyprof.load(GLOO[1])).tables
    cs = _records(tables["collective_stats"])
    assert [(c["op"], c["bytes"], c["count"], c["ranks"]) for c in cs] == [("broadcast", 4096, 4, 1)]
    tr = sorted((r["src"], r["dst"], r["op"], r["bytes"], r["count"], r["peer_from"])
                for r in _records(tables["transfers"]))
    # the peer from the c10d op's inputs, a rank of the trace's one process group (pg_config)
    assert tr == [(0, 1, "recv", 4096, 4, "c10d op"), (1, 0, "send", 2048, 4, "c10d op")]
    nccl = build(polyprof.load(DATA / "kineto" / "a100_nccl_rank0.json.gz")).tables["collective_stats"]
    assert set(nccl["op"].tolist()) == {"allreduce", "broadcast"} and (nccl["bytes"] > 0).all()


def test_the_sampled_pair_is_not_aligned_and_says_why():
    """The real sampled_rank0/1 pair (two ranks of a 128-rank job) has only NCCL SendRecv
    kernels, each launched inside ``nccl:all_to_all``, ``nccl:all_reduce`` or
    ``nccl:_all_gather_base``: collectives of those kinds, no transfer (before, 20
    transfers to an unknown rank). Recorded from different collectives of the job (no
    process group names them), they match no pairing of the two ranks: not aligned, no
    straggler row."""
    job = polyprof.load_ranks([str(p) for p in SAMPLED]).analyze(executor="serial")
    cs = _records(job.tables["collective_stats"])
    assert sorted((c["op"], c["count"], c["ranks"]) for c in cs) == \
        [("allgather", 4, 2), ("allreduce", 8, 2), ("alltoall", 8, 2)]
    assert len(job.tables["straggler_collectives"]) == 0 and len(job.tables["transfers"]) == 0
    al = _records(job.tables["rank_alignment"])[1]
    assert not al["aligned"] and math.isnan(al["bound_ns"])
    assert "no collective matched" in al["message"]
    assert job.overview["max_bound_ns"] == 0.0 and job.overview["aligned_ranks"] == 1


def test_shape_bytes():
    assert shape_bytes('[[1024]]', '["float"]') == 4096
    assert shape_bytes([[32, 64], [], []], ["float", "Scalar", ""]) == 8192
    assert shape_bytes('[[[1024]], [], [], []]', '["TensorList", "", "Scalar", "Scalar"]') == 0
    assert shape_bytes("not json", "[]") == 0


# --- alignment from transfers, on tables made to a known truth -------------------------

def _table(rows: list[tuple[str, int, int, int, int]]):
    """A collective table of transfers: (op, peer, start, end, bytes) per row."""
    rows = sorted(rows, key=lambda r: r[2])
    n = len(rows)
    col = {c: np.zeros(n, np.int64) for c in COLUMNS}
    col.update({"key": np.array([r[0] for r in rows], object), "seq": np.arange(n), "seq_from": np.full(n, "order", object),
                "op": np.array([r[0] for r in rows], object), "pg": np.full(n, "", object),
                "name": np.array([f"gloo:{r[0]}" for r in rows], object),
                "start_ns": np.array([r[2] for r in rows], np.int64), "end_ns": np.array([r[3] for r in rows], np.int64),
                "bytes": np.array([r[4] for r in rows], np.int64), "p2p": np.ones(n, bool),
                "peer": np.array([r[1] for r in rows], np.int64), "peer_from": np.full(n, "c10d op", object),
                "host": np.ones(n, bool), "row": np.arange(n)})
    col["dur_ns"] = col["end_ns"] - col["start_ns"]
    return frame(col)


def _pipeline(offsets: dict[int, int], steps: int = 10, drop_first: int | None = None,
              backward: bool = True) -> dict[int, object]:
    """Three pipeline stages 0 <-> 1 <-> 2: activations forward, gradients back (when
    ``backward``), each rank's times on its own clock (true time + its offset)."""
    rows: dict[int, list] = {0: [], 1: [], 2: []}

    def xfer(src: int, dst: int, t: int, nbytes: int) -> None:
        rows[src].append(("send", dst, t + offsets[src], t + 8_000 + offsets[src], nbytes))
        rows[dst].append(("recv", src, t - 40_000 + offsets[dst], t + 25_000 + offsets[dst], nbytes))

    for k in range(steps):
        t = 1_000_000 * (k + 1)
        xfer(0, 1, t, 8192)
        xfer(1, 2, t + 100_000, 8192)
        if backward:
            xfer(2, 1, t + 500_000, 4096)
            xfer(1, 0, t + 600_000, 4096)
    if drop_first is not None:  # that rank's recording began after its first transfer
        rows[drop_first] = sorted(rows[drop_first], key=lambda r: r[2])[1:]
    return {r: _table(v) for r, v in rows.items()}


def test_transfers_align_a_pipeline_within_their_bound_through_a_chain():
    offsets = {0: 0, 1: 3_000_000_000, 2: -7_654_321}
    clocks = align_ranks(_pipeline(offsets))
    for r in (1, 2):
        c = clocks[r]
        assert c.aligned and c.fit.method.startswith("transfers") and math.isfinite(c.fit.bound_ns)
        assert abs(c.fit.offset_ns - (offsets[0] - offsets[r])) <= c.fit.bound_ns <= 200_000
    assert clocks[1].matched == 20 and "with rank" not in clocks[1].message
    assert "with rank 1" in clocks[2].message  # no transfer with rank 0: through rank 1, the bounds add
    assert clocks[2].fit.bound_ns >= clocks[1].fit.bound_ns


def test_a_recording_that_misses_the_first_transfer_is_matched_with_a_shift():
    offsets = {0: 0, 1: 55_555, 2: 0}
    clocks = align_ranks(_pipeline(offsets, drop_first=1))
    c = clocks[1]
    assert c.aligned and abs(c.fit.offset_ns - (0 - 55_555)) <= c.fit.bound_ns <= 200_000


def test_transfers_one_way_only_bound_nothing_and_say_so():
    al = _records(alignment_table(align_ranks(_pipeline({0: 0, 1: 10_000, 2: 0}, backward=False))))
    assert [a["aligned"] for a in al] == [True, False, False]
    assert "transfers go one way only (rank 0 to rank 1)" in al[1]["message"]
    assert all(math.isnan(a["bound_ns"]) for a in al[1:])


def _nccl_rank(path: Path, rank: int, offset_us: float, steps: int = 6) -> Path:
    """A Kineto trace of NCCL point-to-point kernels as PyTorch 2.4+ writes them (the
    comms args copied onto the kernel: Collective name, Src/Dst Rank, In msg nelems,
    dtype). A fake for GPU hardware (none here): the layout of tests/data/traces'
    A100 NCCL trace, with SendRecv kernels of a two-stage pipeline."""
    ev: list[dict] = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python"}},
                      {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]

    def kernel(coll: str, peer: int, t: float, dur: float, corr: int) -> None:
        args = {"device": 0, "stream": 20, "correlation": corr, "External id": corr, "Collective name": coll,
                "In msg nelems": 2048, "Out msg nelems": 2048, "dtype": "Float", "Group size": 2,
                "Process Group Name": "0", ("Dst Rank" if coll == "send" else "Src Rank"): peer}
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                   "pid": 0, "tid": 20, "ts": t + offset_us, "dur": dur, "args": args})

    other = 1 - rank
    for k in range(steps):
        t = 1000.0 * (k + 1)
        if rank == 0:
            kernel("send", other, t, 50, 10 * k + 1)
            kernel("recv", other, t + 290, 65, 10 * k + 2)
        else:
            kernel("recv", other, t - 10, 65, 10 * k + 1)
            kernel("send", other, t + 300, 50, 10 * k + 2)
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
           "traceEvents": ev}
    out = path / f"nccl_p2p_rank{rank}.json"
    out.write_text(__import__("json").dumps(doc))
    return out


def test_nccl_sendrecv_kernels_with_peers_are_transfers_that_align(tmp_path):
    files = [_nccl_rank(tmp_path, 0, 0.0), _nccl_rank(tmp_path, 1, 5000.0)]
    job = polyprof.load_ranks([str(f) for f in files]).analyze(executor="serial", window=None)
    rows = {(r["src"], r["dst"]): r for r in _records(job.tables["transfers"])}
    assert set(rows) == {(0, 1), (1, 0)}
    for r in rows.values():  # 2048 floats, 6 each way; a kernel blocks its stream, not the host
        assert (r["bytes"], r["count"], r["sends"], r["recvs"], r["blocking_ns"]) == (8192, 6, 6, 6, 0)
    assert len(job.tables["collective_stats"]) == 0 and len(job.tables["straggler_collectives"]) == 0
    al = _records(job.tables["rank_alignment"])[1]
    assert al["method"] == "transfers" and al["aligned"] and al["collectives"] == 12
    assert abs(al["offset_ns"] - (-5_000_000)) <= al["bound_ns"] <= 100_000


@pytest.mark.parametrize("seed", range(20))
def test_collective_groups_as_numpys_unique_of_the_pairs(seed):
    """``collectives._first_and_group``: the first row of each distinct (op, bytes) pair and
    each row's pair, as ``np.unique(axis=0)`` numbers them (bytes negative, -1 for unknown,
    or too wide for one int64 key: NumPy's own)."""
    from polyprof.analyze.collectives import _first_and_group

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    a = rng.integers(0, 4, n).astype(np.int64)
    b = rng.choice(np.array([-1, 0, 1024, 4096, 1 << 40 if seed % 3 else 1 << 62], np.int64), n)
    _, first, inv = np.unique(np.stack([a, b], axis=1), axis=0, return_index=True, return_inverse=True)
    got_first, got_inv = _first_and_group(a, b)
    assert got_first.tolist() == first.tolist() and got_inv.tolist() == inv.ravel().tolist()


def test_sends_inside_an_all_to_all_are_one_collective(tmp_path):
    """The real gloo pair with each step's send and recv wrapped in an ``all_to_all`` range
    (a hand-made all-to-all of point-to-point calls): on each rank the step's two transfers
    are one all-to-all collective, from the first c10d op's start to the last range's end,
    numbered in order and matched across the ranks like the broadcasts; no transfer is
    left. Outside such a range (the unwrapped files, test above) they stay transfers."""
    import gzip
    import json

    from polyprof.analyze.collectives import collective_table

    paths = []
    for r, src in enumerate(GLOO):
        doc = json.load(gzip.open(src))
        evs = doc["traceEvents"] if isinstance(doc, dict) else doc
        xs = sorted((e for e in evs if e.get("ph") == "X" and e["name"] in
                     ("c10d::send", "c10d::recv_", "gloo:send", "gloo:recv")), key=lambda e: e["ts"])
        spans = []
        for k in range(0, len(xs), 4):  # per step: c10d op, its range, the other c10d op, its range
            first, last = xs[k], xs[k + 3]
            spans.append((first["ts"], last["ts"] + last["dur"]))
            evs.append({"ph": "X", "cat": "user_annotation", "name": "all_to_all", "pid": first["pid"],
                        "tid": first["tid"], "ts": first["ts"] - 1, "dur": last["ts"] + last["dur"] - first["ts"] + 2})
        path = tmp_path / f"rank{r}.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
        ct = collective_table(polyprof.load(path))
        a2a = np.asarray(ct["op"], object) == "alltoall"
        assert a2a.sum() == 4 and not np.asarray(ct["p2p"], bool).any()
        assert np.asarray(ct["seq"], np.int64)[a2a].tolist() == [0, 1, 2, 3]
        s0, e0 = np.asarray(ct["start_ns"], np.int64)[a2a], np.asarray(ct["end_ns"], np.int64)[a2a]
        want = np.array(spans) * 1000  # µs -> ns, the trace's own zero
        assert np.abs((e0 - s0) - (want[:, 1] - want[:, 0])).max() <= 1000
        assert np.abs((s0 - s0[0]) - (want[:, 0] - want[0, 0])).max() <= 1000
    job = polyprof.load_ranks([str(p) for p in paths]).analyze(executor="serial")
    assert len(job.tables["transfers"]) == 0
    assert sorted(set(job.tables["straggler_collectives"]["op"].tolist())) == ["alltoall", "broadcast"]
    assert (job.tables["straggler_collectives"]["op"] == "alltoall").sum() == 4
