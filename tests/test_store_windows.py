"""The summary of a store's rank above the memory bound, window by window (issue 34,
item 1; ranks/stepwise.py, store/window.py): on small replicates of real traces with the
bound forced low (POLYPROF_MEMORY_BOUND), so that the windowed path runs in seconds,
``summary STORE --json`` and the terminal summary are byte for byte those of the rank
read whole; the windows begin only at quiet points; report says plainly what it does."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from test_bigrank import _replicate

import polyprof
from polyprof.cli import main
from polyprof.ranks import fits, stepwise
from polyprof.report.tables import build
from polyprof.store import Store
from polyprof.trace import metadata_keys as mkeys
from polyprof.store.window import plan, read_window

KINETO = Path(__file__).resolve().parent / "data/traces/kineto"
V100 = KINETO / "v100_ns_resolution_rank0.json.gz"
NCCL = KINETO / "a100_nccl_rank0.json.gz"
#: the bound that sends these replicates (tens of thousands of events) window by window
LOW = str((fits.BASE_BYTES >> 20) + 1)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Replicates of the V100 trace (two copies: a window at the copies' edge, device
    work behind the host all along) and of the A100 NCCL trace (two copies:
    communication, collectives), each converted to a store."""
    out = {}
    for name, src in (("v100", V100), ("nccl", NCCL)):
        d = tmp_path_factory.mktemp(name)
        path = _replicate(src, d / "rank0.json", 2)
        out[name] = polyprof.load_ranks([path]).convert(d / "s", chunk_rows=20000)
    return out


def _summary(capsys, store: Path, *args: str) -> bytes:
    assert main(["summary", str(store), *args]) == 0
    return capsys.readouterr().out.encode()


@pytest.mark.parametrize("name", ["v100", "nccl"])
def test_windowed_summary_is_the_whole_ranks(stores, name, capsys, monkeypatch, caplog):
    """Every table, finding and overview line of ``summary STORE --json`` and the terminal
    summary: the same bytes whether the rank is read whole or window by window."""
    store = stores[name]
    whole_json = _summary(capsys, store, "--json")
    whole_text = _summary(capsys, store)
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    seen = []
    real = stepwise.summarise
    monkeypatch.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    with caplog.at_level(logging.INFO, logger="polyprof"):
        got_json = _summary(capsys, store, "--json")
    assert seen and len(seen[0].events) >= 2, "the windowed path ran, in two windows or more"
    assert "windows of whole steps" in caplog.text
    assert got_json == whole_json
    assert _summary(capsys, store) == whole_text


def test_the_windows_begin_at_quiet_points(stores):
    """Nothing spans a window's start, no flow and no correlation id joins two windows,
    each window holds whole steps, and the windows hold every event once."""
    folder = _rank(stores["v100"])
    p = plan(folder, 1 << 14)
    assert len(p.events) == 2 and p.steps == 10  # the copies' edge: the only quiet point here
    ev = pq.read_table(folder / "events.parquet", columns=["name", "start_ns", "end_ns", "correlation_id"])
    start, end = ev.column("start_ns").to_numpy(), ev.column("end_ns").to_numpy()
    window = np.searchsorted(p.bounds, start, "right") - 1
    assert np.bincount(window).tolist() == p.events.tolist() and p.events.sum() == len(start)
    for b in p.bounds[1:-1].tolist():
        assert not ((start < b) & (end > b)).any()
    corr = ev.column("correlation_id").to_numpy(zero_copy_only=False)
    has = ~np.isnan(corr.astype(float))
    for c in np.unique(corr[has]).tolist()[:2000]:
        assert len(set(window[has][corr[has] == c].tolist())) == 1
    fl = pq.read_table(folder / "flows.parquet").to_pydict()
    assert (window[fl["src"]] == window[fl["dst"]]).all()
    names = ev.column("name").to_pylist()
    steps = [i for i, n in enumerate(names) if n.startswith("ProfilerStep#")]
    assert all(window[i] == np.searchsorted(p.bounds, end[i] - 1, "right") - 1 for i in steps)
    one = read_window(folder, *next(p.windows())).trace
    assert one.n_events == p.events[0] and len(one.flows["src"])


def test_a_rank_without_quiet_points_or_steps_is_read_whole(tmp_path, stores):
    """One copy of the V100 trace has no quiet point (its device runs behind the host all
    along); a trace of one step has nothing to cut; the default window of a rank recorded
    by a schedule is every step, the whole trace: all three are summarised whole."""
    one = _rank(polyprof.load_ranks([V100]).convert(tmp_path / "one"))
    assert len(plan(one, 1 << 14).events) == 1 and stepwise.windowed(one, 1 << 14) is None
    cpu = _rank(polyprof.load_ranks([KINETO / "cpu_only_rank34.json.gz"]).convert(tmp_path / "cpu"))
    assert plan(cpu, 1).steps == 1 and stepwise.windowed(cpu, 1) is None
    trace = Store(stores["v100"]).load(0)
    assert stepwise.windowed(_rank(stores["v100"]), 1 << 14) is not None
    trace.metadata[mkeys.SCHEDULE] = {"wait": 1, "warmup": 1, "active": 3}
    scheduled = _rank(polyprof.load_ranks([trace]).convert(tmp_path / "scheduled"))
    assert len(plan(scheduled, 1 << 14).events) == 2 and stepwise.windowed(scheduled, 1 << 14) is None


def _rank(store: Path) -> Path:
    st = Store(store)
    return st.path(st.ranks[0])


def test_memory_bound_is_read_from_the_environment(monkeypatch, capsys, stores):
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", "256")
    assert fits.memory_bound() == 256 << 20
    assert fits.window_events(fits.memory_bound()) == (106 << 20) // fits.WINDOW_EVENT_BYTES
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", "lots")
    assert main(["summary", str(stores["v100"])]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "POLYPROF_MEMORY_BOUND='lots'" in err
    monkeypatch.delenv("POLYPROF_MEMORY_BOUND")
    assert fits.memory_bound() == fits.MEMORY_BOUND == 512 << 20


def test_report_above_the_bound_says_what_it_does(stores, monkeypatch, capsys, tmp_path, caplog):
    """The HTML report shows a rank's events, so it reads the rank in detail whole: above
    the bound it says so in the log, and where the rank would not fit, in one line
    before any work."""
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    out = tmp_path / "r.html"
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert main(["report", str(stores["v100"]), "-o", str(out)]) == 0
    assert "above the memory bound" in caplog.text and "reads the rank whole" in caplog.text and out.exists()
    out.unlink()
    capsys.readouterr()
    monkeypatch.setattr(fits, "available_bytes", lambda: 64 << 20)
    assert main(["report", str(stores["v100"]), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "64 MiB is available" in err and not out.exists()


def test_an_idle_stretch_across_windows_is_one_gap():
    """A stream busy until 5 ns before the first window's end, with nothing in the second
    window, and starting again 7 ns into the third with work launched there: the windows
    counted a tail (5, "other"), no row, and a lead (7, host-wait); the rank has one gap
    of 112 ns, ended by host-launched work (analyze/breakdown.py: host-wait)."""
    from polyprof.ranks.window_values import _join

    key = ("/device:GPU:0", "stream 7", 3)
    parts = [{key: (True, 0, True, 5)}, {}, {key: (True, 7, True, 0)}]
    added, pieces, moved, fewer = _join(parts, [(0, 50), (50, 150), (150, 200)], key)
    assert (added, pieces) == (100, 1)  # the window without a row: idle, one piece
    assert moved == 105 and 2 + pieces - fewer == 1  # 5 + 100 move to host-wait; 3 pieces are 1 gap
    parts[2][key] = (True, 7, False, 0)  # no known launch: the stretch stays "other"
    assert _join(parts, [(0, 50), (50, 150), (150, 200)], key)[2] == 0


def test_windows_larger_than_the_bound_allows_are_said(stores, monkeypatch, capsys, caplog):
    """Quiet points too far apart for the bound: the summary says so in the log, and in one
    line before reading where the largest window would not fit in the memory available."""
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)  # windows of 16384 events; a copy holds ~45,000
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert main(["summary", str(stores["v100"]), "--json"]) == 0
    assert "the largest window between quiet points holds" in caplog.text
    capsys.readouterr()
    monkeypatch.setattr(fits, "available_bytes", lambda: 64 << 20)
    assert main(["summary", str(stores["v100"]), "--json"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a window of" in err and "64 MiB is available" in err


def test_a_rank_without_profiler_steps_above_the_bound_is_read_whole_and_says_so(tmp_path, capsys, monkeypatch,
                                                                                 caplog):
    """A JAX rank (its steps from ``StepTraceAnnotation``, no ``ProfilerStep#N``) above the
    bound cannot be cut into windows: it is read whole, with the same summary as below
    the bound, and one warning line says so."""
    xspace = Path(__file__).resolve().parent / "data/h200/jax_train_step_h200.xplane.pb"
    store = polyprof.load_ranks([xspace]).convert(tmp_path / "s")
    whole = _summary(capsys, store, "--json")
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", "1")  # MiB: below any rank (the file is small)
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        got = _summary(capsys, store, "--json")
    assert got == whole
    assert "above the memory bound" in caplog.text and "read whole" in caplog.text


def test_a_scheduled_ranks_summary_says_what_it_recorded_at_any_bound(tmp_path, capsys, monkeypatch):
    """A schedule's cycles leave unrecorded steps in the analysed span: the summary of its
    store says how much of the span was recorded (``recorded_in_span_ns``) as the trace
    file's does, the same bytes below and above the memory bound (a rank recorded by a
    schedule is read whole at any bound: ``stepwise.windowed``; a rank read window by
    window adds up its windows' stretches by the same rule, ``analyze.common.recorded_in_span``)."""
    out = tmp_path / "sched.polyprof"
    with polyprof.profile(["host"], schedule="wait=2,warmup=1,active=2,repeat=3", output=out):
        for i in range(15):  # steps 3-4, 8-9, 13-14 recorded; the waits between them sleep
            with polyprof.section("work"):
                time.sleep(0.01)
            if i % 5 in (0, 1):
                time.sleep(0.05)
            polyprof.step()
    want = build(polyprof.load(out)).overview
    assert 0 < want["recorded_in_span_ns"] < 0.6 * want["analysed_span_ns"]
    store = polyprof.load_ranks([out]).convert(tmp_path / "s")
    assert stepwise.windowed(_rank(store), 1) is None
    whole = _summary(capsys, store, "--json")
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", "1")
    assert _summary(capsys, store, "--json") == whole
    got = orjson.loads(whole)["overview"]["per_rank"]["0"]
    assert {k: got[k] for k in ("analysed_span_ns", "recorded_in_span_ns", "window")} == \
        {k: want[k] for k in ("analysed_span_ns", "recorded_in_span_ns", "window")}
