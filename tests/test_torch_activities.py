"""torch's recording read from its results in memory (plugins/torch/activities.py) against
torch's own JSON export of the same recording read by the Kineto reader.

Real torch on CPU: each recording is read both ways; every event, thread track, flow and
stat (decoded from the deferred args) must be the same, except torch's three marks of
its recording window, which only the export has (documented in the module).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from polyprof.formats import kineto  # noqa: E402
from polyprof.plugins.torch import activities  # noqa: E402

WINDOW_MARKS = {"PyTorch Profiler (0)", "Iteration Start: PyTorch Profiler", "Record Window End"}

pytestmark = pytest.mark.skipif(not hasattr(torch._C._autograd._ProfilerResult, "trace_activities"),
                                reason="this torch has no trace_activities()")


def workload(threads: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def step() -> None:
        with torch.profiler.record_function("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # fwdbwd flows
        opt.step()

    for _ in range(2):
        step()
    if threads:
        th = threading.Thread(target=lambda: (model(x).sum(), torch.ones(3).add_(1)), name="worker")
        th.start()
        th.join()


def record(tmp_path, **kw):
    flags = {k: True for k in ("profile_all_threads", "trace_only") if kw.pop(k, False)}
    if flags:  # trace_only: what the plugin asks for (torch builds no per-op Python events)
        kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(**flags)
    p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw)
    p.start()
    workload(threads="profile_all_threads" in flags)
    p.stop()
    path = tmp_path / "torch.json"
    p.export_chrome_trace(str(path))
    return activities.read(p), kineto.load(path)


def track_key(t, rows):
    tr = [t.tracks[i] for i in t.events["track"][rows]]
    return [(t.planes[x.plane].name, x.tid, x.kind) for x in tr]


@pytest.mark.parametrize("options", [
    {},
    {"record_shapes": True, "with_stack": True},
    {"profile_memory": True, "record_shapes": True},
    {"profile_all_threads": True, "with_flops": True, "with_modules": True},
    {"profile_all_threads": True, "trace_only": True, "record_shapes": True},
], ids=["plain", "shapes+stack", "memory", "all_threads", "trace_only"])
def test_in_memory_read_equals_the_export_read(tmp_path, options):
    mem, exp = record(tmp_path, **options)
    assert mem is not None
    assert mem.stats.pending == 2  # the args are still text, the correlation ids in torch
    assert "external_id" not in mem.stats.loaded() and "external_id" in exp.stats.loaded()
    names = exp.names().tolist()
    marks = [i for i, n in enumerate(names) if n in WINDOW_MARKS]
    assert len(marks) == 3 and marks == list(range(exp.n_events - 3, exp.n_events))
    n = exp.n_events - 3
    assert mem.n_events == n > 50
    rows = np.arange(n)
    assert mem.names().tolist() == names[:n]
    assert mem.categories().tolist() == exp.categories(rows).tolist()
    assert (mem.start_ns == exp.start_ns[:n]).all() and (mem.dur_ns == exp.dur_ns[:n]).all()
    assert track_key(mem, rows) == track_key(exp, rows)
    assert {tr.tid for tr in mem.tracks} == {tr.tid for tr in exp.tracks if tr.tid >= 0}  # < 0: pseudo processes
    for key, c in exp.stats.items():
        if key == "Op count":  # an arg of the window mark
            continue
        got = mem.stats[key]
        assert got.rows.tolist() == c.rows.tolist(), key
        assert got.kind == c.kind and got.values.tolist() == c.values.tolist(), key
    assert set(mem.stats) == set(exp.stats) - {"Op count"}
    for k in ("src", "dst", "id"):
        assert mem.flows[k].tolist() == exp.flows[k].tolist(), k
    assert len(exp.flows["src"]) > 0
    assert [mem.strings[c] for c in mem.flows["category"]] == [exp.strings[c] for c in exp.flows["category"]]
    for k in ("schemaVersion", "host_name", "with_stack", "profile_memory", "record_shapes"):
        assert mem.metadata.get(k) == exp.metadata.get(k), k
    if options.get("profile_memory"):
        assert "Bytes" in mem.stats or "bytes" in mem.stats


def test_recording_without_trace_activities_is_left_to_the_export():
    class Old:  # a torch before 2.13: its results have no trace_activities()
        class profiler:  # noqa: N801
            kineto_results = object()

    assert activities.read(Old()) is None and not activities.available(Old())


def test_names_torch_cannot_write_are_read_exactly(tmp_path):
    """torch's JSON writer does not escape names: a quote makes its export invalid JSON
    (the whole recording was lost to polyprof) and a tab or a non-ASCII letter becomes
    "unknown"; read from memory, every name is exact."""
    names = ['say "hi"', "tab\there", "café ☕", "back\\slash"]
    p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    p.start()
    for n in names:
        with torch.profiler.record_function(n):
            torch.ones(2).sum()
    p.stop()
    t = activities.read(p)
    got = t.names(np.flatnonzero(t.categories() == "user_annotation")).tolist()
    assert got == names
    path = tmp_path / "torch.json"
    p.export_chrome_trace(str(path))
    text = path.read_text()
    assert '"name": "unknown"' in text and '"name": "say "hi"",' in text  # what torch wrote


def test_args_fetched_after_the_profiler_is_gone_equal_the_export(tmp_path):
    """The args are fetched from torch's results on first use: the Trace keeps those
    results alive, so they can be asked for after torch's profiler object is dropped."""
    import gc

    p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    p.start()
    workload(threads=False)
    p.stop()
    path = tmp_path / "torch.json"
    p.export_chrome_trace(str(path))
    mem = activities.read(p)
    del p
    gc.collect()
    torch.ones(10_000).add_(1)  # the allocator reuses what was freed
    exp = kineto.load(path)
    for key in ("Input Dims", "Ev Idx", "Sequence number"):
        assert mem.stats[key].values.tolist() == exp.stats[key].values.tolist(), key


def test_args_that_are_not_json_are_left_out_and_counted():
    from polyprof.formats.kineto.collector import arg_batches
    from polyprof.formats.kineto.deferred import DeferredArgs

    args = ['"a": 1', '"a": 2, "b": [1, 2]', '"a": oops', '"a": 1e999', ""]
    batches, lost = arg_batches(args, first=10)
    assert lost == 2 and len(batches) == 1 and batches[0][0] == 10
    calls = []

    def make():
        calls.append(1)
        return batches

    d = DeferredArgs(make, {})
    assert calls == []  # made on first use
    cols = d.columns(None)
    assert calls == [1]
    assert cols["a"].rows.tolist() == [10, 11] and cols["a"].values.tolist() == [1, 2]
    assert cols["b"].rows.tolist() == [11] and cols["b"].values.tolist() == ["[1,2]"]
    d.columns(None)
    assert calls == [1]


def test_the_plugin_asks_torch_for_no_per_op_events_unless_memory_needs_them():
    from polyprof.plugins.torch import TorchPlugin

    cfg = TorchPlugin()._profile_kwargs(torch)["experimental_config"]
    assert cfg.trace_only and cfg.__getstate__()[7] is True  # the 8th field: profile_all_threads
    kw = TorchPlugin(memory=True)._profile_kwargs(torch)
    assert kw["profile_memory"] and "experimental_config" not in kw  # torch's memory profile needs them


def test_the_session_stop_fetches_no_args_from_torch(monkeypatch):
    """torch formats each op's args on every call (the costliest field): the session's
    stop (steps, sections, re-homing, merges) must not ask for them; the first stat
    lookup does, once."""
    import polyprof

    calls, ext_calls = [], []
    real, real_ext = activities._args_of, activities._external_ids

    def counting(acts, res):
        calls.append(len(acts))
        return real(acts, res)

    def counting_ext(acts, res):
        ext_calls.append(len(acts))
        return real_ext(acts, res)

    monkeypatch.setattr(activities, "_args_of", counting)
    monkeypatch.setattr(activities, "_external_ids", counting_ext)
    with polyprof.profile(plugins=["torch"], options={"host": {"sample_interval_s": 0}}) as s:
        for _ in range(2):
            with polyprof.section("step body"):
                workload(threads=False)
            polyprof.step()
        with torch.profiler.record_function("ProfilerStep#7"):  # torch's own step range: kept, step 7
            torch.ones(3).sum()
    t = s.trace
    assert s.errors == [] and calls == []
    assert t.stat_dense("step", -1)[t.names() == "ProfilerStep#7"].tolist() == [7]
    assert (t.categories() == "cpu_op").sum() > 20 and sorted(t.stat_dense("step", -1)[t.categories() == "step"]) == [0, 1]
    assert len(t.stats["Ev Idx"]) > 20 and len(calls) == 1
    assert len(t.stats["Sequence number"]) > 0 and len(calls) == 1
    assert ext_calls == [] and "external_id" not in t.stats.loaded()
    ext = t.stats["external_id"]  # torch's correlation ids, fetched now: one per torch op
    assert len(ext_calls) == 1 and len(calls) == 1
    ops = np.flatnonzero(t.categories() == "cpu_op")
    assert np.isin(ops, ext.rows).all() and len(np.unique(ext.lookup(ops)[1])) == len(ops)


def test_activities_of_another_process_or_a_device_are_left_to_the_export():
    """Stand-ins for what real CPU torch cannot record here (a GPU kernel, an activity
    with another process's id): read() declines, so the plugin reads torch's export."""
    import os

    class Act:
        def __init__(self, kind, pid):
            self.kind, self.pid = kind, pid

        def type(self):
            return self.kind

        def device_id(self):
            return self.pid

    class Prof:
        def __init__(self, acts):
            self.profiler = type("P", (), {"kineto_results": type("R", (), {"trace_activities": lambda s: acts})()})()

    me = os.getpid()
    assert activities.read(Prof([Act("cpu_op", me), Act("kernel", 0)])) is None
    assert activities.read(Prof([Act("cpu_op", me)] * 40 + [Act("cpu_op", me + 1)])) is None  # the last is checked


@pytest.mark.parametrize("in_memory", [True, False])
def test_collect_runs_on_the_session_thread_only_for_a_recording_in_memory(monkeypatch, in_memory):
    """A recording read from torch's memory is collected on the session's thread (CPU
    work on it: no thread hand-off, no limit that could only drop it); one read from
    torch's JSON export keeps the helper thread and its time limit. Same ops either way."""
    import polyprof
    from polyprof.plugins.torch import TorchPlugin

    if not in_memory:
        monkeypatch.setattr(activities, "read", lambda prof: None)  # as on a torch before 2.13
    where = []
    real = TorchPlugin._collect

    def spy(self):
        where.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(TorchPlugin, "_collect", spy)
    with polyprof.profile(plugins=["torch"], options={"host": {"sample_interval_s": 0}}) as s:
        with polyprof.section("work"):
            workload(threads=False)
    assert s.errors == [] and s.trace.metadata["plugins"]["torch"] == "ok"
    assert where == [threading.current_thread().name if in_memory else "polyprof-collect-torch"]
    assert (s.trace.categories() == "cpu_op").sum() > 20 and (s.trace.names() == "work").sum() == 1
