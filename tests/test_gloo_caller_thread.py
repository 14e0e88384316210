"""gloo's ``gloo:send`` / ``gloo:recv`` run on the thread that called c10d, not on a
group's worker thread (``analyze/process_groups.py: gloo_workers, gloo_groups``).

Real 2-rank gloo job recorded by torch.profiler (tests/data/traces/gloo_rooted/sendrecv*,
see its README): 3 world all-reduces, a broadcast in a second group of both ranks, then
rank 0 sends to rank 1. Before: the caller's thread (the smallest id) was counted as one
of a group's worker threads, so every later thread moved down a slot and the world's
all-reduces were keyed ``allreduce`` and ``1/allreduce``, differently on each rank."""

from __future__ import annotations

from pathlib import Path

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.analyze.frames import column
from polyprof.analyze.process_groups import gloo_workers
from polyprof.trace import metadata_keys as mkeys

TRACES = Path(__file__).parent / "data" / "traces"
ROOTED = TRACES / "gloo_rooted"


def _rows(trace) -> list[tuple]:
    t = collective_table(trace)
    return list(zip(*(column(t, c).tolist() for c in ("key", "seq", "name", "root"))))


def test_send_and_recv_on_the_callers_thread_move_no_group():
    """Each rank's 3 worker threads seen are fewer than its two groups' 4: which group
    each ran is not told, so every collective keeps the bare op, as on the other rank."""
    got = {}
    for r in (0, 1):
        rows = _rows(polyprof.load(ROOTED / f"sendrecv.rank{r}.pt.trace.json.gz"))
        got[r] = [(k, s) for k, s, _, _ in rows]
        assert [(k, s) for k, s, n, _ in rows if n == "gloo:all_reduce"] == [("allreduce", i) for i in range(3)], rows
        assert [(k, s) for k, s, n, _ in rows if n == "gloo:broadcast"] == [("broadcast", 0)], rows
        assert [(k, s) for k, s, n, _ in rows if n in ("gloo:send", "gloo:recv")] == \
            [("send" if r == 0 else "recv", 0)], rows
    assert [x for x in got[0] if x[0] != "send"] == [x for x in got[1] if x[0] != "recv"]


def test_the_callers_thread_is_no_worker():
    """Worker threads: named ``pt_gloo_runloop``, or running nothing but gloo's work
    ranges (Kineto names subworld rank 1's thread 14638 both ``python`` and
    ``pt_gloo_runloop``; its track keeps ``python``)."""
    t = polyprof.load(ROOTED / "subworld.rank1.pt.trace.json.gz")
    w = gloo_workers(t)
    assert sorted(tr.tid for tr in t.tracks if w[tr.id] and tr.tid > 0) == [14631, 14632, 14637, 14638]
    t = polyprof.load(ROOTED / "sendrecv.rank0.pt.trace.json.gz")
    w = gloo_workers(t)
    assert sorted(tr.tid for tr in t.tracks if w[tr.id] and tr.tid > 0) == [10509, 10511, 10515]


def test_one_group_unlisted_keeps_its_root():
    """A one-group job recorded without ``pg_config`` (tests/data/traces/gloo's, its groups
    taken out): its two worker threads are one group's, and the broadcast's root (rank 0)
    is kept. Before: the caller's thread, running ``gloo:send``, made 3 threads, more than
    one group has: every root unknown (-1)."""
    t = polyprof.load(TRACES / "gloo" / "gloo_rank0.json.gz")
    info = t.metadata.get(mkeys.DISTRIBUTED_INFO)
    assert isinstance(info, dict) and info.pop("pg_config") and info.pop("pg_count")
    rows = _rows(t)
    assert {(k, r) for k, _, _, r in rows if k == "broadcast"} == {("broadcast", 0)}, rows
    assert {k for k, *_ in rows} == {"broadcast", "send", "recv"}


def test_thread_ids_below_the_process_id_tell_no_order():
    """Thread ids wrap at ``pid_max``: a worker's id below its process's (made before its
    threads) was handed out after a wrap, and the order of ids is not the order made, so
    the groups are not told (the bare op). Here subworld rank 1's process id is set
    between its two groups' threads, as after a wrap. Before: ``1/broadcast`` all the
    same, by position."""
    t = polyprof.load(ROOTED / "subworld.rank1.pt.trace.json.gz")
    assert {k for k, *_ in _rows(t)} == {"broadcast", "1/broadcast", "allreduce"}
    t = polyprof.load(ROOTED / "subworld.rank1.pt.trace.json.gz")
    (plane,) = t.planes
    plane.pid = 14635
    rows = _rows(t)
    assert {k for k, *_ in rows} == {"broadcast", "allreduce"}, rows
    assert [s for k, s, *_ in rows if k == "broadcast"] == list(range(12))
