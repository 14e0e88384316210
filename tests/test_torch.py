"""The PyTorch plugin and the polyprof.torch.profile drop-in, with real torch on CPU.

torch is imported once for the module; models are tiny so the suite stays fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import numpy as np
import orjson
import pytest

torch = pytest.importorskip("torch")

import polyprof  # noqa: E402
from polyprof.plugins.torch import TorchPlugin, default_activities  # noqa: E402
from polyprof.trace.categories import Kind  # noqa: E402
from polyprof.trace.metadata_keys import plugin_fit  # noqa: E402

QUIET = {"host": {"sample_interval_s": 0}}
SRC = str(Path(__file__).resolve().parents[1] / "src")


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    return model, opt, x, y


def train_step(model, opt, x, y, sections: bool = True):
    sec = polyprof.section if sections else _null
    with sec("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with sec("backward"):
        opt.zero_grad()
        loss.backward()
    with sec("optimizer"):
        opt.step()


class _null:
    def __init__(self, name):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def rows_named(trace, name, category=None):
    names = trace.names()
    sel = names == name
    if category is not None:
        sel &= trace.categories() == category
    return np.flatnonzero(sel)


def torch_json(path: Path) -> list[dict]:
    files = sorted(path.glob("*.json"))
    assert files, f"no torch export in {path}"
    return orjson.loads(files[-1].read_bytes())["traceEvents"]


# ----------------------------------------------------------------------------- (a)
@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory):
    """A real 3-step training loop profiled through polyprof.profile(plugins=["torch"])."""
    keep = tmp_path_factory.mktemp("torch_export")
    model, opt, x, y = make_model()
    train_step(model, opt, x, y, sections=False)  # warm up torch outside the profile
    with polyprof.profile(plugins=["torch"], options={**QUIET, "torch": {"keep_export": str(keep)}}) as s:
        for _ in range(3):
            train_step(model, opt, x, y)
            with torch.profiler.record_function("my_block"):
                (x * 2).sum()
            with polyprof.section("attn"), torch.profiler.record_function("attn"):
                x.relu()
            polyprof.step()
    return s, s.trace, keep, threading.get_native_id()


def test_sections_and_torch_ops_share_one_trace_and_track(plugin_run):
    s, t, _, tid = plugin_run
    assert s.errors == [] and t.metadata["plugins"]["torch"] == "ok"
    ops = np.flatnonzero(np.char.startswith(t.names().astype(str), "aten::"))
    assert len(ops) > 50
    fwd = rows_named(t, "forward", "section")
    assert len(fwd) == 3
    main = {int(t.events["track"][r]) for r in fwd}
    assert len(main) == 1
    track = t.tracks[main.pop()]
    assert track.tid == tid and t.planes[track.plane].name == "/host:CPU"
    # torch's ops of the main thread are on that same track
    assert set(t.events["track"][ops].tolist()) == {track.id}


def test_ops_recorded_during_forward_nest_under_forward(plugin_run):
    """Which ops ran inside "forward" is taken from torch's own JSON (its copy of
    the section encloses them on torch's clock); after alignment each of them must
    lie inside polyprof's "forward" section on the session clock."""
    _, t, keep, tid = plugin_run
    ev = [e for e in torch_json(keep) if e.get("ph") == "X" and e.get("tid") == tid]
    fwd_torch = sorted((e for e in ev if e["name"] == "forward" and e["cat"] == "user_annotation"),
                       key=lambda e: e["ts"])
    assert len(fwd_torch) == 3
    fwd = rows_named(t, "forward", "section")
    fwd = fwd[np.argsort(t.start_ns[fwd])]
    names, start, end = t.names(), t.start_ns, t.end_ns
    cpu = t.rows_of_kind(Kind.CPU_OP)
    for k, f in enumerate(fwd_torch):
        expected = sorted((e["ts"], e["name"]) for e in ev if e["cat"] == "cpu_op"
                          and f["ts"] <= e["ts"] and e["ts"] + e["dur"] <= f["ts"] + f["dur"]
                          and e["name"].startswith("aten::"))
        assert len(expected) >= 5
        r = fwd[k]
        # torch's times carry the clock fit's error (its bound): an op that starts within
        # the bound of the section's start is inside it (seen under load 50)
        unc = int(plugin_fit(t.metadata, "torch")["uncertainty_ns"])
        inside = cpu[(start[cpu] >= start[r] - unc) & (end[cpu] <= end[r] + unc)]
        got = sorted(zip(start[inside].tolist(), names[inside].tolist()))
        got_aten = [n for _, n in got if n.startswith("aten::")]
        assert got_aten == [n for _, n in expected], f"forward #{k}"
        assert set(t.events["track"][inside].tolist()) == {t.events["track"][r]}


def test_sections_show_in_torch_trace_and_are_not_doubled(plugin_run):
    _, t, keep, tid = plugin_run
    ev = torch_json(keep)
    ann = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    for name in ("forward", "backward", "optimizer"):
        mine = [e for e in ann if e["name"] == name]
        assert len(mine) == 3 and all(e["tid"] == tid for e in mine), name
        # in polyprof's trace: only the host plugin's sections, no torch copies
        assert len(rows_named(t, name)) == 3
        assert len(rows_named(t, name, "user_annotation")) == 0
    # polyprof.step() became ProfilerStep#N in torch's trace, numbered like polyprof's steps;
    # polyprof's trace keeps its own Steps line only
    assert sorted(e["name"] for e in ann if e["name"].startswith("ProfilerStep#")) == \
        ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert not any(n.startswith("ProfilerStep#") for n in t.names().tolist())
    steps = np.flatnonzero(t.categories() == "step")
    assert sorted(t.stat_dense("step", -1)[steps].tolist()) == [0, 1, 2]
    assert len(rows_named(t, "polyprof::clock_sync")) == 0
    sync = plugin_fit(t.metadata, "torch")
    assert sync["method"].startswith("paired_markers")
    assert 0 < sync["uncertainty_ns"] < 200_000
    # Kineto's clock is wall time: the session's wall anchor alone lands within a few ms
    assert abs(sync["cycles"][0]["wall_anchor_residual_ns"]) < 5_000_000


def test_record_function_ranges_are_sections(plugin_run):
    _, t, _, _ = plugin_run
    mine = rows_named(t, "my_block")
    assert len(mine) == 3
    assert (t.kinds[mine] == Kind.ANNOTATION).all()
    # a record_function with the same name as a polyprof section is the user's own: kept
    attn = rows_named(t, "attn")
    assert sorted(t.categories(attn).tolist()) == ["section"] * 3 + ["user_annotation"] * 3


def test_ops_on_worker_thread_nest_under_its_section():
    model, opt, x, y = make_model()
    box = {}

    def work():
        box["tid"] = threading.get_native_id()
        with polyprof.section("worker_fwd"):
            model(x)

    with polyprof.profile(plugins=["torch"], options=QUIET) as s:
        th = threading.Thread(target=work, name="worker")
        th.start()
        th.join()
    t = s.trace
    sec = rows_named(t, "worker_fwd", "section")
    assert len(sec) == 1
    track = t.tracks[int(t.events["track"][sec[0]])]
    assert track.name == "worker" and track.tid == box["tid"]
    ops = np.flatnonzero((t.events["track"] == track.id) & (t.categories() == "cpu_op"))
    assert len(ops) >= 3
    r = sec[0]
    assert (t.start_ns[ops] >= t.start_ns[r]).all() and (t.end_ns[ops] <= t.end_ns[r]).all()


# ----------------------------------------------------------------------------- (b)
def run_schedule(prof_cls, tmp: Path, n_steps: int = 9, **extra):
    from torch.profiler import ProfilerActivity, schedule, tensorboard_trace_handler

    model, opt, x, y = make_model()
    calls: list[tuple[int, Path]] = []
    tb = tensorboard_trace_handler(str(tmp / "tb"))

    def on_ready(prof):  # counts calls; torch's JSON written by torch's own handler
        before = set((tmp / "tb").glob("*.json"))
        tb(prof)
        (path,) = set((tmp / "tb").glob("*.json")) - before
        calls.append((prof.step_num, path))

    with prof_cls(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                  on_trace_ready=on_ready, **extra) as prof:
        for _ in range(n_steps):
            train_step(model, opt, x, y, sections=False)
            prof.step()
    return prof, calls


def test_dropin_with_schedule_and_on_trace_ready(tmp_path):
    import polyprof.torch as ptorch

    (tmp_path / "plain").mkdir()
    (tmp_path / "pp").mkdir()
    plain, plain_calls = run_schedule(torch.profiler.profile, tmp_path / "plain")
    prof, calls = run_schedule(ptorch.profile, tmp_path / "pp", polyprof_options=QUIET)
    assert isinstance(prof, torch.profiler.profile)
    # called as torch calls it: same number of cycles, at the same steps
    assert [c[0] for c in calls] == [c[0] for c in plain_calls] == [4, 8]
    # torch's default repeat=0: two cycles, both in the trace's schedule (the analyses keep to them)
    assert prof.trace.metadata["schedule"]["recorded_steps"] == [2, 3, 6, 7]
    assert len(prof.trace.metadata["schedule"]["windows_ns"]) == 2
    for _, path in calls:
        doc = orjson.loads(path.read_bytes())
        steps = sorted(e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
        assert len(steps) == 2 and any(e.get("cat") == "cpu_op" for e in doc["traceEvents"])
    # torch's tables of the last (warm-up) recording: torch's own, without polyprof's clock markers
    assert [e.key for e in prof.key_averages()] == [e.key for e in plain.key_averages()]
    t = prof.trace
    assert t is not None and t.metadata["plugins"]["torch"] == "ok"
    ps = [n for n in t.names().tolist() if n.startswith("ProfilerStep#")]
    assert sorted(ps) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#6", "ProfilerStep#7"]
    for r in np.flatnonzero(np.char.startswith(t.names().astype(str), "ProfilerStep#")):
        assert t.event_stats(int(r))["step"] == int(t.names()[r].split("#")[1])
    # .step() also drove polyprof.step(): one Steps-line event per step, numbered alike
    steps = np.flatnonzero(t.categories() == "step")
    assert sorted(t.stat_dense("step", -1)[steps].tolist()) == list(range(9))
    # every recorded cycle is aligned on its own
    cycles = plugin_fit(t.metadata, "torch")["cycles"]
    assert [c.get("method", "")[:14] for c in cycles if "events" in c] == ["paired_markers"] * 2, cycles
    # torch's ProfilerStep#2 lies inside polyprof's step 2
    r = rows_named(t, "ProfilerStep#2")[0]
    s2 = steps[t.stat_dense("step", -1)[steps] == 2][0]
    assert t.start_ns[s2] <= t.start_ns[r] and t.end_ns[r] <= t.end_ns[s2]


def test_dropin_schedule_keeps_every_recorded_step_in_the_analysis(tmp_path):
    """torch's schedule(wait=2, warmup=1, active=4) on a real CPU model, 10 steps. Before:
    the trace said nothing of the schedule (``metadata["schedule"]`` None), so the
    analysis took torch's 4 recorded steps (3-6) as a plain run and skipped step 3 as a
    warm-up ("steps 4-6 of 3-6"): 3 of the 4 asked for. Now the drop-in records the
    schedule as ``polyprof run --schedule`` does (recorded_steps, in the saved file too)
    and every recorded step is analysed. torch's default repeat=0 (two cycles) is in
    test_dropin_with_schedule_and_on_trace_ready; no schedule, no metadata below."""
    import polyprof.torch as ptorch
    from polyprof.analyze import window
    from polyprof.derive import cache
    from torch.profiler import ProfilerActivity, schedule

    model, opt, x, y = make_model()
    out = tmp_path / "dropin.polyprof"
    with ptorch.profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=2, warmup=1, active=4, repeat=1),
                        output=str(out), polyprof_options=QUIET) as prof:
        for _ in range(10):
            train_step(model, opt, x, y)
            prof.step()
    for t in (prof.trace, polyprof.load(out)):
        said = t.metadata["schedule"]
        assert said["recorded_steps"] == [3, 4, 5, 6], said
        assert (said["wait"], said["warmup"], said["active"], said["repeat"]) == (2, 1, 4, 1)
        (lo, hi), = said["windows_ns"]
        steps = cache.steps(t)
        at = {int(n): (int(a), int(b)) for n, a, b in zip(steps.number, steps.start, steps.end)}
        assert lo <= at[3][0] and at[6][1] <= hi, (lo, hi, at)
        sel = window.select(t, window.AUTO)
        assert steps.number[sel.index].tolist() == [3, 4, 5, 6], sel.label
        assert "the steps the schedule recorded" in sel.label and "warm-up" not in sel.label, sel.label
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(out)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "analysed window: all 4 steps (3-6) (the steps the schedule recorded" in r.stdout, r.stdout[:600]


NESTED = textwrap.dedent("""
    import torch, polyprof.torch as ptorch
    from torch.profiler import ProfilerActivity, schedule
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(3):  # recorded by the session's own torch recording, before the drop-in
        step()
    with ptorch.profile(activities=[ProfilerActivity.CPU],
                        schedule=schedule(wait=1, warmup=1, active=3, repeat=1)) as prof:
        for _ in range(10):
            step()
            prof.step()
    for _ in range(3):  # and after it
        step()
    print("drop-in trace:", prof.trace)
""")


def test_dropin_under_polyprof_run_keeps_its_schedule(tmp_path):
    """The drop-in nested in `polyprof run`'s session (which records before and after
    it too), schedule(wait=1, warmup=1, active=3, repeat=1), 10 steps. Before: the
    drop-in opened no session, so the schedule was said nowhere (``metadata["schedule"]``
    None) and the analysis skipped torch's first recorded step as a warm-up ("steps 3-4
    of 2-4"). Now the session's torch plugin keeps what the drop-in's schedule recorded
    and steps 2, 3, 4 are all analysed, as for the drop-in on its own."""
    from polyprof.analyze import window
    from polyprof.derive import cache

    script, out = tmp_path / "nested.py", tmp_path / "nested.polyprof"
    script.write_text(NESTED)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", str(out), str(script)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "drop-in trace: None" in r.stdout  # nested: no session of its own
    t = polyprof.load(out)
    said = t.metadata["schedule"]
    assert said["recorded_steps"] == [2, 3, 4], said
    assert (said["by"], said["wait"], said["warmup"], said["active"], said["repeat"]) == ("torch.profiler", 1, 1, 3, 1)
    (lo, hi), = said["windows_ns"]
    steps = cache.steps(t)
    at = {int(n): (int(a), int(b)) for n, a, b in zip(steps.number, steps.start, steps.end)}
    assert lo <= at[2][0] and at[4][1] <= hi, (lo, hi, at)
    sel = window.select(t, window.AUTO)
    assert steps.number[sel.index].tolist() == [2, 3, 4], sel.label
    # the session's own recording, before and after the drop-in, is in the trace all the same
    names = t.names()
    cpu = t.rows_of_kind(Kind.CPU_OP)
    mm = cpu[names[cpu] == "aten::addmm"]
    assert (t.end_ns[mm] <= lo).any() and (t.start_ns[mm] >= hi).any()
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(out)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "analysed window: all 3 steps (2-4) (the steps the schedule recorded" in r.stdout, r.stdout[:600]


def test_dropin_schedule_that_recorded_no_step_says_so(tmp_path):
    """schedule(wait=1, warmup=1, active=2, repeat=2) over a single step: torch recorded
    none (``recorded_steps`` []), and the analysis takes the one step there is (a wait
    step). Before, its label still said "(the steps the schedule recorded)"."""
    import polyprof.torch as ptorch
    from polyprof.analyze import window
    from torch.profiler import ProfilerActivity, schedule

    model, opt, x, y = make_model()
    with ptorch.profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                        polyprof_options=QUIET) as prof:
        train_step(model, opt, x, y)
        prof.step()
    assert prof.trace.metadata["schedule"]["recorded_steps"] == []
    label = window.select(prof.trace, window.AUTO).label
    assert "the schedule recorded no whole step: every step analysed" in label, label
    assert "the steps the schedule recorded" not in label, label
    prof.trace.metadata["schedule"]["recorded_steps"] = [50, 51]  # steps the trace does not hold
    label = window.select(prof.trace, window.AUTO).label
    assert "none of the steps the schedule recorded (50-51) is in the trace: every step analysed" in label, label


def test_dropins_of_one_session_are_said_together():
    """Two drop-ins driving one session's torch plugin (plugins/torch/handover.py,
    DropIns): every one's recorded steps and stretches; the schedule's arguments only
    where they agree; none said when no drop-in had a schedule."""
    from polyprof.plugins.torch.handover import DropIns

    a = {"wait": 1, "warmup": 1, "active": 2, "repeat": 1, "by": "torch.profiler", "recorded_steps": [2, 3],
         "windows_ns": [[10, 20]]}
    d = DropIns()
    d.done(None, [0, 1], [[1, 5]])
    assert d.said() is None  # torch recorded every step: nothing to keep to
    d.done(a, [2, 3], [[10, 20]])
    said = d.said()
    assert said["recorded_steps"] == [0, 1, 2, 3] and said["windows_ns"] == [[1, 5], [10, 20]]
    assert said["drop_ins"] == 2 and said["wait"] == 1 and said["by"] == "torch.profiler"
    d.done({**a, "wait": 3, "recorded_steps": [9]}, [9], [[30, 40]])
    assert "wait" not in d.said() and d.said()["recorded_steps"] == [0, 1, 2, 3, 9]
    one = DropIns()
    one.done(a, [2, 3], [[10, 20]])
    assert one.said() == a


def test_dropin_rejects_unknown_plugin_names():
    import polyprof.torch as ptorch

    with pytest.raises(polyprof.PolyprofError, match="no_such_plugin"):
        ptorch.profile(plugins=["no_such_plugin"])


def test_dropin_without_schedule_exports_after_exit(tmp_path):
    import polyprof.torch as ptorch

    model, opt, x, y = make_model()
    with ptorch.profile(polyprof_options=QUIET) as prof:
        with polyprof.section("forward"):
            model(x)
    out = tmp_path / "t.json.gz"
    prof.export_chrome_trace(str(out))  # after exit, as with torch
    import gzip

    doc = orjson.loads(gzip.decompress(out.read_bytes()))
    assert any(e.get("name") == "forward" and e.get("cat") == "user_annotation" for e in doc["traceEvents"])
    t = prof.trace
    assert len(rows_named(t, "forward")) == 1 and len(t.rows_of_kind(Kind.CPU_OP)) > 3
    assert "schedule" not in t.metadata  # torch recorded every step: the analysis's own warm-up rule holds


# ----------------------------------------------------------------------------- availability
def test_torch_not_importable_plugin_unavailable_session_works(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes find_spec/import fail like a missing torch
    avail = TorchPlugin.availability()
    assert not avail.ok and "torch" in avail.reason
    with polyprof.profile(plugins=["torch"], options=QUIET) as s:
        with polyprof.section("still here"):
            pass
    assert len(rows_named(s.trace, "still here")) == 1
    assert any(e["plugin"] == "torch" and "not installed" in e["error"] for e in s.errors)


def test_gpu_activities_chosen_when_devices_present():
    """No GPU here: a stand-in torch says CUDA and XPU are present (a fake, by necessity)."""
    PA = types.SimpleNamespace(CPU="cpu", CUDA="cuda", XPU="xpu", MTIA="mtia")
    dev = lambda ok: types.SimpleNamespace(is_available=lambda: ok)  # noqa: E731
    fake = types.SimpleNamespace(
        profiler=types.SimpleNamespace(ProfilerActivity=PA, supported_activities=lambda: {"cpu", "cuda", "xpu"}),
        cuda=dev(True), xpu=dev(True), mtia=dev(False))
    assert default_activities(fake) == ["cpu", "cuda", "xpu"]
    assert [a.name for a in default_activities(torch)] == ["CPU"]


# ----------------------------------------------------------------------------- subprocess
def test_lazy_start_on_import_and_foreign_profiler(tmp_path):
    """A default session profiles torch once the program imports it; a torch.profiler
    the program runs itself is left working and ours reports what it lost."""
    script = textwrap.dedent("""
        import sys, polyprof
        assert "torch" not in sys.modules
        with polyprof.profile(options={"host": {"sample_interval_s": 0}}) as s:
            import torch
            with polyprof.section("after_import"):
                torch.ones(4, 4).sum()
        t = s.trace
        ops = [n for n in t.names().tolist() if n.startswith("aten::")]
        assert "aten::sum" in ops, ops
        assert t.metadata["plugins"]["torch"] == "ok"
        with polyprof.profile(plugins=["torch"], options={"host": {"sample_interval_s": 0}}) as s2:
            with torch.profiler.profile() as user_prof:
                torch.ones(2).sum()
        assert any(e.key == "aten::sum" for e in user_prof.key_averages())
        assert any("torch.profiler" in w for w in s2.trace.metadata["warnings"]), s2.trace.metadata
        print("OK")
    """)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


# ----------------------------------------------------------------------------- clock fit
def _brackets(times, width, kineto_of):
    samples = [(t, t + width) for t in times]
    # the marker's Kineto stamp was taken somewhere inside its bracket
    k = np.array([kineto_of(t + (i * 37) % (width + 1)) for i, t in enumerate(times)], np.int64)
    return samples, k


def test_fit_alignment_constant_offset_and_drift():
    """The clock service's convex hull on the torch markers' brackets (trace/clock.py):
    the error stays within the bound, with and without drift."""
    from polyprof.plugins.torch import fit_alignment

    off = 1_795_000_000_000_000_000
    times = [1_000_000, 1_010_000, 1_020_000, 11_000_000_000, 11_000_010_000, 11_000_020_000]
    samples, k = _brackets(times, 2_000, lambda s: s + off)
    a = fit_alignment(samples, k)
    assert a.method == "paired_markers" and abs(a.drift_ppm) < 0.2 and a.bound_ns <= 2_001
    s = np.array([1_000_000, 5_000_000_000, 10_000_000_000, 11_000_020_000], np.int64)
    assert np.abs(a.to_host(s + off) - s).max() <= a.bound_ns

    drift = 50e-6  # 50 ppm over 11 s = 550 µs: far more than the brackets
    samples, k = _brackets(times, 2_000, lambda s: s + off + int(drift * (s - times[0])))
    a = fit_alignment(samples, k)
    assert abs(-a.drift_ppm * 1e-6 - drift) < 1e-6
    truth = s + off + (drift * (s - times[0])).astype(np.int64)
    assert np.abs(a.to_host(truth) - s).max() <= a.bound_ns + 2

    assert fit_alignment(samples[:-1], k) is None  # markers and brackets do not pair up


def test_dropin_inside_a_session_hands_over_to_its_torch_plugin():
    """As under `polyprof run`: the outer session's torch plugin records before and
    after, the drop-in's active cycle in between, all in the outer trace."""
    import polyprof.torch as ptorch
    from torch.profiler import schedule

    model, opt, x, y = make_model()
    with polyprof.profile(plugins=["torch"], options=QUIET) as s:
        with polyprof.section("before"):
            model(x)
        with ptorch.profile(schedule=schedule(wait=0, warmup=1, active=1)) as prof:
            for _ in range(3):
                train_step(model, opt, x, y)
                prof.step()
        with polyprof.section("after"):
            model(x)
    assert prof.trace is None and s.errors == []
    t = s.trace
    names = t.names()
    assert "ProfilerStep#1" in set(names.tolist())
    for sec in ("before", "after"):
        r = rows_named(t, sec, "section")[0]
        cpu = t.rows_of_kind(Kind.CPU_OP)
        inside = cpu[(t.start_ns[cpu] >= t.start_ns[r]) & (t.end_ns[cpu] <= t.end_ns[r])]
        assert "aten::addmm" in set(names[inside].tolist()), sec
    cycles = [c for c in plugin_fit(t.metadata, "torch")["cycles"] if "events" in c]
    # own recording; the drop-in's two cycles (steps 1 and 3: torch saves the open one
    # at exit); own recording again
    assert len(cycles) == 4


def test_gpu_trace_rehomed_on_session_clock(kineto_files):
    """The GPU path of the merge, on a real A100 trace recorded elsewhere (no GPU here):
    device planes, streams, flows and ids survive; every time moves by one offset."""
    from polyprof.formats import kineto
    from polyprof.plugins.torch import _Capture, ingest_kineto
    from polyprof.collect.plugin import SessionContext

    path = next(f for f in kineto_files if f.name.startswith("a100_alexnet"))
    src = kineto.load(path)
    anchor = {"mono_ns": 5_000_000_000, "wall_ns": int(src.start_ns.min()) + 1_000, "uncertainty_ns": 7}
    ctx = SessionContext(start_ns=0, wall_anchor=anchor)
    out, info = ingest_kineto(src, _Capture(0), [], {}, ctx, host_has_steps=False)
    assert info["method"] == "wall_anchor" and info["uncertainty_ns"] == 7
    assert out.n_events == src.n_events
    src_dev = sorted(p.name for p in src.planes if p.kind == "device")
    assert src_dev and sorted(p.name for p in out.planes if p.kind == "device") == src_dev
    key = lambda t: sorted(zip(t.names().tolist(), t.start_ns.tolist()))  # noqa: E731
    shift = anchor["mono_ns"] - anchor["wall_ns"]
    assert key(out) == sorted((n, s + shift) for n, s in key(src))
    assert len(out.flows["src"]) == len(src.flows["src"]) > 0
    fl = lambda t: sorted(zip(t.names(t.flows["src"]).tolist(), t.names(t.flows["dst"]).tolist()))  # noqa: E731
    assert fl(out) == fl(src)
    kern = out.rows_of_kind(Kind.KERNEL)
    assert len(kern) and np.isin(kern, out.stats["correlation_id"].rows).all()


def test_torch_profiler_that_cannot_start_is_reported_not_raised():
    opts = {**QUIET, "torch": {"activities": ["no_such_activity"]}}
    with polyprof.profile(plugins=["torch"], options=opts) as s:
        with polyprof.section("work"):
            torch.ones(3).sum()
    t = s.trace
    assert len(rows_named(t, "work")) == 1 and len(t.rows_of_kind(Kind.CPU_OP)) == 0
    assert any("did not start" in w and "no_such_activity".upper() in w.upper() for w in t.metadata["warnings"])


def test_plugin_never_collected_leaves_no_temp_dir():
    """A plugin stopped but never collected (failed stop, conformance checks) removes
    the folder its exports went to."""
    import gc
    import os

    from polyprof.collect.clock import now_ns, wall_anchor
    from polyprof.collect.plugin import SessionContext
    from polyprof.plugins.torch import TorchPlugin

    p = TorchPlugin()
    p.start(SessionContext(start_ns=now_ns(), wall_anchor=wall_anchor()))
    d = p._export_dir()  # where an export (older torch, device activities) is written
    assert os.path.isdir(d) and p._export_dir() == d
    p.stop()
    del p
    gc.collect()
    assert not os.path.exists(d)


def test_a_recording_read_from_memory_writes_no_file(tmp_path, monkeypatch):
    """Read from torch's results in memory, a session makes no export folder at all."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with polyprof.profile(plugins=["torch"], options={"host": {"sample_interval_s": 0}}) as s:
        torch.ones(4).sum()
    assert s.trace.metadata["plugins"]["torch"] == "ok" and len(s.trace.rows_of_kind(Kind.CPU_OP))
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- section listeners
def test_sections_mirror_into_torch_only_while_torch_records() -> None:
    """The torch plugin listens to sections (a Python call on each enter and exit, off
    the compiled fast path) only while its torch profiler records: not before torch is
    imported, not after the session stops."""
    from polyprof.collect import recorder

    with polyprof.profile(plugins=["torch"], options={"host": {"sample_interval_s": 0}}) as s:
        rec = recorder.active_recorder()
        assert rec is not None and len(rec.listeners) == 1  # torch is imported here: recording
        with polyprof.section("mirrored"):
            torch.ones(2).sum()
    assert rec.listeners == []
    assert (s.trace.to_pandas().name == "mirrored").sum() == 1  # the copy was dropped again
    code = ("import sys, polyprof; from polyprof.collect import recorder\n"
            "with polyprof.profile():\n"
            "    print(len(recorder.active_recorder().listeners), 'torch' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=SRC))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", "False"]  # a program that never imports torch: no listener


# ----------------------------------------------------------------------------- args left undecoded
def test_torch_args_stay_undecoded_through_the_merge_and_equal_an_eager_decode(tmp_path):
    """The session's stop decodes none of torch's args (they are carried through the
    re-homing and both merges as text); decoded afterwards, every column equals an eager
    decode of torch's own JSON of the same recording (tests/kineto_reference.py, the
    reader before args were deferred) put through the same re-homing."""
    import kineto_reference as reference

    from polyprof.plugins.torch.ingest import ingest_kineto

    model, opt, x, y = make_model()
    opts = {**QUIET, "torch": {"keep_export": str(tmp_path), "record_shapes": True}}
    with polyprof.profile(plugins=["torch"], options=opts) as s:
        for _ in range(2):
            train_step(model, opt, x, y)
            polyprof.step()
    t = s.trace
    assert s.errors == [] and t.stats.pending >= 1  # nothing decoded by the stop
    p = next(sl.plugin for sl in s._slots if sl.name == "torch")
    rec = p._recorder
    (kept,) = sorted(tmp_path.glob("*.json"))
    eager, _ = ingest_kineto(reference.load(kept), p._captures[0], p._mirrors, p._names_by_tid(), p.ctx,
                             p._had_steps, sections=(list(rec.sections), dict(rec.threads)))
    assert eager.stats.pending == 0
    # torch's export ends with 3 marks of its recording window, which its results in
    # memory (what the plugin reads, plugins/torch/activities.py) do not have
    n = eager.n_events - 3
    assert eager.categories(np.arange(n, eager.n_events)).tolist() == ["Trace", "", ""]
    off = t.n_events - n  # torch's part comes last in the session's merge
    assert off > 0 and t.names()[off:].tolist() == eager.names()[:n].tolist()
    assert (t.start_ns[off:] == eager.start_ns[:n]).all()
    assert {"Input Dims", "Sequence number", "external_id"} <= set(eager.stats)
    for key, c in eager.stats.items():
        if key == "Op count":  # an arg of the window mark
            continue
        got = t.stats[key]
        mine = got.rows >= off
        assert (got.rows[mine] - off).tolist() == c.rows.tolist(), key
        assert got.values[mine].tolist() == c.values.tolist() and got.kind == c.kind, key
    for key in set(t.stats) - set(eager.stats):  # the host plugin's keys only
        assert (t.stats[key].rows < off).all(), key


def test_names_torch_cannot_write_keep_the_torch_ops():
    """A quote in a section's or range's name made torch's JSON invalid, and the whole
    torch recording was lost; read from torch's results in memory it is kept, names exact."""
    with polyprof.profile(plugins=["torch"], options=QUIET) as s:
        with polyprof.section('say "hi"'), torch.profiler.record_function('range "x" é'):
            torch.ones(4).sum()
    t = s.trace
    assert s.errors == [] and not t.metadata.get("warnings")
    assert len(rows_named(t, 'range "x" é', "user_annotation")) == 1
    assert len(rows_named(t, 'say "hi"', "section")) == 1 and len(t.rows_of_kind(Kind.CPU_OP)) >= 1


def test_results_that_cannot_be_read_in_memory_fall_back_to_the_export(monkeypatch):
    from polyprof.plugins.torch import activities

    def broken(prof):
        raise RuntimeError("no results")

    monkeypatch.setattr(activities, "read", broken)
    with polyprof.profile(plugins=["torch"], options=QUIET) as s:
        with polyprof.section("work"):
            torch.ones(4).sum()
    t = s.trace
    assert any("could not be read in memory" in w and "no results" in w for w in t.metadata["warnings"])
    assert len(t.rows_of_kind(Kind.CPU_OP)) >= 1 and len(rows_named(t, "work")) == 1
    assert t.metadata["plugins"]["torch"] == "ok"


# A program's own torch.profiler(with_stack=True) under polyprof: tests/test_with_stack.py


def test_dropin_whose_torch_start_raises_closes_its_session(monkeypatch):
    """The drop-in's start opens the session before torch's start, unseen; when torch's
    start raises, the session is closed again (no session left recording)."""
    import polyprof.torch as ptorch
    from polyprof.collect.session import active_session

    def refuse(self):
        raise RuntimeError("torch refused to start")

    monkeypatch.setattr(torch.profiler.profiler._KinetoProfile, "prepare_trace", refuse)
    prof = ptorch.profile(activities=[torch.profiler.ProfilerActivity.CPU], plugins=["host"], polyprof_options=QUIET)
    with pytest.raises(RuntimeError, match="torch refused"):
        prof.start()
    assert active_session() is None and prof.session is None


TWO_DROPINS = """
import torch, polyprof.torch as pt
from torch.profiler import schedule
m = torch.nn.Linear(64, 64)
x = torch.randn(16, 64)
for k in range(2):
    with pt.profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=1)) as p:
        for i in range(5):
            for _ in range(1 if k == 0 else 10):
                m(x).relu().sum().backward()
            p.step()
"""


def test_a_dropin_the_program_lets_go_of_keeps_its_recording(tmp_path):
    """The two drop-ins, each deleted and collected after its block (as ``p`` rebound by
    the next loop round is, once the garbage collector runs): the session's torch plugin
    reads their cycles at its stop, from the drop-in's directory, which went with the
    drop-in. The plugin's collect failed ("torch_..._cycle1.json: no such file"): 10
    events of the host, no torch op, no schedule; the directory is now held until read."""
    script, out = tmp_path / "gone.py", tmp_path / "gone.polyprof"
    script.write_text("import gc\n" + TWO_DROPINS.replace("            p.step()\n",
                                                          "            p.step()\n    del p\n    gc.collect()\n"))
    assert "gc.collect()" in script.read_text()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", str(out), str(script)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    t = polyprof.load(out)
    assert not t.metadata.get("plugin_errors"), t.metadata.get("plugin_errors")
    assert t.metadata["schedule"]["drop_ins"] == 2
    assert int((t.names() == "aten::mm").sum()) >= 22


def test_two_dropins_under_polyprof_run_keep_both_recordings(tmp_path):
    """Two drop-ins one after the other in `polyprof run`, each recording its steps 2-3:
    their ProfilerStep numbers repeat, so the trace's steps are renumbered 0-3 in time
    order, and matching the recorded numbers [2, 3] kept the second drop-in's two steps
    alone (10 aten::mm a step, 20 of the 22). The stretches torch recorded tell them."""
    from polyprof.analyze import window

    script, out = tmp_path / "two.py", tmp_path / "two.polyprof"
    script.write_text(TWO_DROPINS)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", str(out), str(script)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    t = polyprof.load(out)
    # (a CI run once had no schedule at all: what the session said of its plugins tells why)
    why = {k: t.metadata.get(k) for k in ("plugins", "plugin_errors", "warnings")} | {"stderr": r.stderr[-2000:]}
    assert "schedule" in t.metadata, why
    assert t.metadata["schedule"]["drop_ins"] == 2 and len(t.metadata["schedule"]["windows_ns"]) == 2
    sel = window.select(t, window.AUTO)
    assert len(sel.index) == 4, sel.label
    view = window.view(t, window.AUTO)
    assert int((view.names() == "aten::mm").sum()) == 22


def test_a_recording_whose_file_is_gone_loses_itself_alone():
    """A drop-in's cycle file removed before the session reads it (its directory deleted
    by hand here): that recording is lost, with a warning that names it; the plugin's own
    recordings before and after it are kept (the whole collect failed, every torch op lost)."""
    import shutil

    import polyprof.torch as pt

    m, x = torch.nn.Linear(8, 8), torch.randn(2, 8)
    with polyprof.profile(["torch"]) as s:
        m(x).sum().backward()
        with pt.profile() as p:
            torch.cosh(x)
        shutil.rmtree(p._pp_dir)
        torch.addmm(x, x, torch.randn(8, 8))
    t = s.trace
    assert not t.metadata.get("plugin_errors"), t.metadata.get("plugin_errors")
    names = set(t.names().tolist())
    assert {"aten::linear", "aten::addmm"} <= names and "aten::cosh" not in names
    from polyprof.trace import metadata_keys as mkeys

    said = mkeys.warning_texts(t.metadata)
    assert any("not read" in w for w in said), said
