"""polyprof diff: the auditor's findings on the diff (replicates that run other work,
overlapping collective time, a stray file beside run folders, the HTML title, rows
moved by one stall), each checked on real runs made here or, for the collectives' own
timing, on a synthetic trace built as the other diff tests build them."""

from __future__ import annotations

from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.diff import Runs, diff
from torch_matmuls import matmul_run


def _torch_calls(torch, path: Path, calls: int, steps: int = 6, size: int = 192) -> polyprof.Trace:
    """A real torch.profiler CPU run: ``steps`` recorded steps, each ``calls`` matmuls."""
    return polyprof.load(matmul_run(torch, path, size, steps, calls))


def test_replicates_that_call_an_op_more_often_say_the_program_changed(tmp_path):
    """Three real runs a side, B calling its matmul 3 times a step where A calls it 2:
    with one run a side the verdict said "B runs other work ... the program changed";
    with replicates it said only "No significant change" though every step of every
    run of each side called it alike. Now replicates say it too, per step (not per run)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    a = Runs([_torch_calls(torch, tmp_path / f"a{i}.json", 2) for i in range(3)])
    b = Runs([_torch_calls(torch, tmp_path / f"b{i}.json", 3) for i in range(3)])
    d = diff(a, b)
    ops = d.tables["ops"].to_pandas().set_index("name")
    assert ops.loc["aten::mm", "steady_calls"] and ops.loc["aten::mm", "count_a"] == 2 * 5
    line = next((x for x in d.verdict if x.startswith("B runs other work")), "")
    assert "aten::mm 2 -> 3 calls per step" in line and "the program changed" in line, d.verdict
    # the headline said "No significant change" above that line, and "Unchanged" counted aten::mm (the
    # headline is the changes' where a loaded machine makes a row's or the step's time change too)
    quiet = not d.changes and not d.step_time.get("change")
    assert d.verdict[0].startswith("The program changed (B runs other work, below); no row's time changed "
                                   "significantly" if quiet else ("The program changed", "B is ")), d.verdict
    total = sum(len(t) for t in d.tables.values())
    apart = int("aten::mm" not in {c["name"] for c in d.changes})  # other work, not called changed
    unchanged = next(x for x in d.verdict if x.startswith("Unchanged:"))
    assert unchanged.startswith(f"Unchanged: {total - len(d.changes) - apart} of {total} ") and \
        ("; 1 more are other work (below)" in unchanged) == bool(apart), unchanged
    same = diff(a, Runs([_torch_calls(torch, tmp_path / f"c{i}.json", 2) for i in range(3)]))
    assert not any(x.startswith("B runs other work") for x in same.verdict), same.verdict
    assert not same.verdict[0].startswith("The program changed") and "other work" not in " ".join(same.verdict)
    if not same.changes and not same.step_time.get("change"):
        assert same.verdict[0].startswith("No significant change"), same.verdict


def _gloo_rank(rank: int, overlap: bool) -> polyprof.Trace:
    """Synthetic (a CPU backend's collectives need several processes): one rank's 6
    steps of 10 ms, each with two 3 ms ``gloo:all_reduce`` ranges on two gloo threads,
    at once (``overlap``, DDP's two buckets) or one after the other."""
    from polyprof.trace import TraceBuilder

    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=100 + rank)
    main, g1, g2 = (b.track(host, n, "thread", tid=t) for n, t in (("main", 1), ("gloo1", 2), ("gloo2", 3)))
    for k in range(6):
        o = k * 10_000_000
        b.event(main, f"ProfilerStep#{k}", o, 10_000_000, "user_annotation")
        b.event(g1, "gloo:all_reduce", o + 1_000_000, 3_000_000, "user_annotation")
        b.event(g2, "gloo:all_reduce", o + (2_000_000 if overlap else 5_000_000), 3_000_000, "user_annotation")
    tr = b.build()
    tr.metadata["rank"] = rank
    return tr


def test_a_ranks_time_in_overlapping_collectives_is_their_union():
    """Two bucket all-reduces at once on two gloo threads: the diff summed them (rank 0
    "in" it 50.3 ms a step in a 32.1 ms step); a rank's time in a collective is the union
    of its ranges. Here 4 ms a step overlapped (1-4 and 2-5 ms), 6 ms apart."""
    d = diff([_gloo_rank(0, True), _gloo_rank(1, True)], [_gloo_rank(0, False), _gloo_rank(1, False)])
    sec = d.tables["sections"].to_pandas().set_index("name")
    assert sec.loc["gloo:all_reduce", "step_mean_ns_a"] == pytest.approx(4e6)  # (the mean over the ranks)
    assert sec.loc["gloo:all_reduce", "step_mean_ns_b"] == pytest.approx(6e6)
    assert sec.loc["gloo:all_reduce", "total_ns_a"] == 2 * 5 * 4_000_000  # 5 steps analysed (first left out)
    assert sec.loc["gloo:all_reduce", "count_a"] == 2 * 5 * 2  # every call still counted


def test_a_directory_of_runs_with_a_stray_json_beside_them(tmp_path):
    """A directory of run folders with a program's own JSON beside them (r1.truth.json):
    `diff` took the directory for one run's ranks by the file's ending and failed "no
    trace files in this directory"; the files are told by their first bytes now."""
    import json
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    for side, calls in (("A", 2), ("B", 3)):
        for i in (1, 2):
            (tmp_path / side / f"r{i}").mkdir(parents=True)
            _torch_calls(torch, tmp_path / side / f"r{i}" / "trace.json", calls, steps=4, size=64)
    (tmp_path / "A" / "r1.truth.json").write_text(json.dumps({"step_s": [0.01, 0.01]}))
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(tmp_path / "A"), str(tmp_path / "B"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["overview"]["a"]["runs"] == 2


def test_the_html_title_tells_the_sides_apart():
    """Two runs whose rank files have one name in two folders: the page was titled
    "ddp.0.polyprof +1 vs ddp.0.polyprof +1"; each side is named by its folder now."""
    from polyprof.report.diff_html import _title

    d = diff([_gloo_rank(0, True), _gloo_rank(1, True)], [_gloo_rank(0, False), _gloo_rank(1, False)])
    d.overview["a"]["paths"] = ["runs/even/ddp.0.polyprof", "runs/even/ddp.1.polyprof"]
    d.overview["b"]["paths"] = ["runs/late1/ddp.0.polyprof", "runs/late1/ddp.1.polyprof"]
    assert _title(d) == "even/ +1 vs late1/ +1"
    d.overview["a"]["paths"], d.overview["b"]["paths"] = ["x/a.json"], ["x/b.json"]
    assert _title(d) == "a.json vs b.json"
    # one path the other's with a folder more, absolute (the page read "//tmp/..."), and one file twice
    d.overview["a"]["paths"], d.overview["b"]["paths"] = ["/tmp/n/run.polyprof"], ["/tmp/n/sub/run.polyprof"]
    assert _title(d) == "run.polyprof vs sub/run.polyprof"
    d.overview["b"]["paths"] = ["/tmp/n/run.polyprof"]
    assert _title(d) == "/tmp/n/run.polyprof vs /tmp/n/run.polyprof"


def test_a_device_collective_stays_summed_over_a_process_s_devices():
    """Four CPU devices of one JAX process all-reduce at once: the union meant for a
    rank's gloo ranges merged the devices (one process is one source) and put the
    all-reduce at 1.69 ms where the summary, summing kernels over devices, says 4.23 ms."""
    from polyprof.report.tables import build

    path = Path(__file__).resolve().parent / "data/traces/jax_cpu_job/one_process/four_devices.xplane.pb.gz"
    t = polyprof.load(path)
    d = diff([t], [polyprof.load(path)])
    k = d.tables["kernels"].to_pandas().set_index("name")
    row = k.loc[[n for n in k.index if n.endswith("/all-reduce")][0]]
    stats = build(t).tables["event_stats"].to_pandas()
    whole = stats[stats["name"].str.endswith("/all-reduce")]["total_ns"].sum()
    assert row["total_ns_a"] == pytest.approx(whole, rel=1e-6) and row["count_a"] == 16
