"""The analyses on every shared Kineto trace (recorded by others on real GPUs/MTIA)."""

from __future__ import annotations

import numpy as np
import pytest

import polyprof
import polyprof.analyze as A
from polyprof.derive import cache, derive
from polyprof.trace import keys

pytest.importorskip("polyprof.formats.kineto")

_CACHE: dict[str, polyprof.Trace] = {}


def _load(path) -> polyprof.Trace:
    if str(path) not in _CACHE:
        _CACHE[str(path)] = polyprof.load(path)
    return _CACHE[str(path)]


@pytest.fixture(params=range(11), ids=lambda i: f"trace{i}")
def trace(request, kineto_files):
    if request.param >= len(kineto_files):
        pytest.skip("fewer shared traces")
    path = kineto_files[request.param]
    return path.name, _load(path)


def test_breakdowns_are_consistent(trace):
    name, t = trace
    tb = A.temporal_breakdown(t).to_pandas()
    # per stream (and per device) compute + non-compute + idle = the analysed span
    assert (tb["compute_ns"] + tb["non_compute_ns"] + tb["idle_ns"] == tb["span_ns"]).all(), name
    assert (tb[["compute_ns", "non_compute_ns", "idle_ns"]] >= 0).all().all(), name
    it = A.idle_time_breakdown(t).to_pandas().set_index(["plane", "stream"])
    tbi = tb.set_index(["plane", "stream"])
    assert (it["host_wait_ns"] + it["kernel_wait_ns"] + it["other_ns"] == it["idle_ns"]).all(), name
    assert (it["idle_ns"] == tbi.loc[it.index, "idle_ns"]).all(), name
    # kernel breakdown sums to busy kernel time, counted here straight from the event table
    ev = t.to_pandas()
    on_device = ev["plane"].astype(str).str.startswith("/device:")
    cat, nm = ev["category"].astype(str), ev["name"].astype(str)
    # MTIA's command processor records PE execution (pe_exe, merge, remote) next to DMA and
    # event record/wait under one category
    mtia_exec = (cat == "mtia_ccp_events") & ~nm.isin(["dma_request", "event_record", "event_wait"])
    kernels = ev[on_device & ((cat == "kernel") | mtia_exec)]
    kb = A.kernel_breakdown(t).to_pandas()
    kern = kb[kb["kind"].isin(["compute", "communication"])]
    assert int(kern["total_ns"].sum()) == int(kernels["dur_ns"].sum()), name
    assert int(kern["count"].sum()) == len(kernels), name
    # compute time covered never exceeds the summed compute kernel durations
    dev = tb[tb["track_id"] == -1]
    assert (dev["compute_ns"] <= kern["total_ns"].sum()).all(), name


def test_matched_launches_precede_their_device_work_and_unmatched_are_counted(trace, capsys):
    name, t = trace
    ls = A.launch_stats(t).to_pandas()
    assert (ls["device_start_ns"] >= ls["launch_start_ns"]).all(), name
    from polyprof.derive.cache import correlation

    c = correlation(t).counts
    assert c["matched_by_correlation_id"] + c["matched_by_flow"] + c["matched_in_order"] + \
        c["unmatched_device_activities"] == c["device_activities"]
    assert len(ls) == c["device_activities"] - c["unmatched_device_activities"]
    with capsys.disabled():
        print(f"\n{name}: device activities {c['device_activities']}, unmatched {c['unmatched_device_activities']}, "
              f"launch calls without device activity {c['launch_calls_without_device_activity']} of {c['launch_calls']}")


def test_derived_lines_nest_inside_their_steps(trace):
    name, t = trace
    d = derive(t)
    assert d.n_events >= t.n_events
    ev = d.events
    for p in d.planes:
        tracks = {tr.name: tr.id for tr in d.tracks if tr.plane == p.id and tr.kind == "derived"}
        if keys.LINE_STEPS not in tracks:
            continue
        sr = np.flatnonzero(ev["track"] == tracks[keys.LINE_STEPS])
        ss = ev["start_ns"][sr]
        se = ss + ev["dur_ns"][sr]
        order = np.argsort(ss)
        ss, se = ss[order], se[order]
        assert np.all(se[:-1] <= ss[1:]), f"{name}: steps overlap on {p.name}"
        step_col = d.stats[keys.STEP]
        for line, tid in tracks.items():
            if line == keys.LINE_STEPS:
                continue
            rows = np.flatnonzero(ev["track"] == tid)
            m, _ = step_col.lookup(rows)
            rows = rows[m]
            a = ev["start_ns"][rows]
            b = a + ev["dur_ns"][rows]
            k = np.searchsorted(ss, a, side="right") - 1
            assert np.all(k >= 0) and np.all(b <= se[k]) and np.all(a >= ss[k]), f"{name}: {line} outlasts its step"


def test_summary_and_findings_run(trace):
    from polyprof.report.tables import build, to_json

    name, t = trace
    r = build(t)
    assert r.overview["correlation"]["device_activities"] >= 0
    for f in r.findings:
        assert f.evidence and f.suggestion, f.id
    assert to_json(r)


def test_v100_sections_have_projected_gpu_time(kineto_files):
    path = next(p for p in kineto_files if p.name.startswith("v100"))
    sec = A.section_stats(_load(path)).to_pandas().set_index("name")
    opt = sec.loc["Optimizer.step#SGD.step"]
    assert opt["count"] == 5
    assert opt["projected_ns"] > 0 and opt["device_ns"] > 0 and opt["device_ops"] > 0
    assert opt["projected_ns"] >= opt["device_ns"] * 0.5
    fwd = sec.loc["## forward ##"]
    assert fwd["device_ns"] > 0
    # backward's kernels are launched by the autograd thread, the section is on the main
    # thread: they are handed over, and the three phases then share out the device work
    bwd = sec.loc["## backward ##"]
    assert bwd["device_ns"] > fwd["device_ns"]
    phases = sec.loc[["## forward ##", "## backward ##", "## optimizer ##"]]
    matched = int((cache.correlation(_load(path)).launch >= 0).sum())
    assert phases["device_ops"].sum() == matched
    assert "ProfilerStep#101" not in sec.index  # steps are not sections
    steps = A.step_stats(_load(path)).to_pandas()
    assert steps["step"].tolist() == [101, 102, 103, 104, 105]


def test_v100_derived_lines_in_chrome_export(kineto_files, tmp_path):
    import orjson

    from polyprof.formats.chrome import write

    path = next(p for p in kineto_files if p.name.startswith("v100"))
    d = derive(_load(path))
    assert d.metadata["correlation"]["unmatched_device_activities"] == 0
    doc = orjson.loads(write(d, tmp_path / "v100.json").read_bytes())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in doc if e["ph"] == "M" and e["name"] == "process_name"}
    tids = {}
    for e in doc:
        if e["ph"] == "M" and e["name"] == "thread_name":
            tids.setdefault(procs[e["pid"]], {})[e["args"]["name"]] = e["tid"]
    gpu = tids["/device:GPU:0"]
    for line in (keys.LINE_STEPS, keys.LINE_SECTIONS, keys.LINE_FRAMEWORK_OPS):
        assert line in gpu
    assert len(set(gpu.values())) == len(gpu)  # each line its own track
    steps = [e for e in doc if e.get("cat") == "derived" and e.get("tid") == gpu[keys.LINE_STEPS] and e["ph"] == "X"]
    assert sorted(e["name"] for e in steps) == ["101", "102", "103", "104", "105"]
    opt = [e for e in doc if e.get("tid") == gpu[keys.LINE_SECTIONS] and e["name"] == "Optimizer.step#SGD.step"]
    assert len(opt) == 5 and all(e["dur"] > 0 for e in opt)
