"""Memory over time (issue 15): torch and OpenCL live, Kineto [memory] events, the
analyses, the findings, the views. Real torch, real PoCL, real Chromium; the
synthetic traces stand in only for shapes no program here makes (a CUDA device)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof import analyze as A
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder

from . import browser

MiB = 1 << 20

PATTERN = textwrap.dedent("""
    import torch
    import polyprof

    for step in range(3):
        with polyprof.section("grow"):
            xs = [torch.ones(1 << 20) for _ in range(8)]  # 8 x 4 MiB
        with polyprof.section("shrink"):
            del xs
        polyprof.counter("loss", 0.25)
        polyprof.step()
""")


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, cwd=cwd,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def pattern_run(tmp_path_factory) -> tuple[Path, dict]:
    """The known pattern under ``polyprof run --memory``, and its ``summary --json``."""
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("mem")
    (d / "pattern.py").write_text(PATTERN)
    cli("run", "--memory", "--no-summary", "-o", "p.polyprof", "pattern.py", cwd=d)
    # every step: the summary's default window leaves out the first (warm-up) step
    doc = json.loads(cli("summary", "--json", "--all-steps", "p.polyprof", cwd=d).stdout)
    return d / "p.polyprof", doc


def _records(doc: dict, table: str) -> list[dict]:
    return doc["tables"][table]["records"]


def test_run_memory_peak_and_sections_of_the_known_pattern(pattern_run):
    _, doc = pattern_run
    peaks = [r for r in _records(doc, "memory_peak") if r["allocator"] == "torch"]
    assert len(peaks) == 1 and peaks[0]["device"] == "/host:CPU"
    p = peaks[0]
    assert 32 * MiB <= p["peak_bytes"] - p["start_bytes"] <= 40 * MiB
    sec = {r["name"]: r for r in _records(doc, "section_stats")}
    assert sec["grow"]["alloc_bytes"] == pytest.approx(96 * MiB, rel=0.02)
    assert sec["grow"]["mem_delta_bytes"] == pytest.approx(96 * MiB, rel=0.02)
    assert sec["shrink"]["mem_delta_bytes"] == pytest.approx(-96 * MiB, rel=0.02)
    assert sec["shrink"]["alloc_bytes"] < MiB  # freeing allocates nothing
    assert sec["grow"]["mem_source"] == "allocator"
    assert sec["grow"]["mem_max_bytes"] - sec["grow"]["mem_min_bytes"] >= 32 * MiB * 0.98
    # the eight 4 MiB tensors live at the peak, made by aten::empty inside "grow"
    live = _records(doc, "memory_at_peak")
    big = [r for r in live if r["bytes"] == 4 * MiB]
    assert len(big) == 8
    assert {r["section"] for r in big} == {"grow"} and {r["op"] for r in big} == {"aten::empty"}
    assert all(r["stack"].startswith("grow > ") for r in big)
    found = {f["id"]: f for f in doc["findings"]}
    assert found["memory_peak_held_by_one"]["evidence"]["holder"] == "grow"
    assert "memory_growth" not in found  # freed every step: no leak
    # the script's counter is summarised (issue 18: counters were recorded but shown nowhere)
    loss = [r for r in _records(doc, "counter_stats") if r["name"] == "loss"]
    assert loss and loss[0]["last"] == 0.25


def test_chrome_export_has_a_memory_counter_track(pattern_run, tmp_path):
    path, _ = pattern_run
    out = tmp_path / "p.json"
    cli("export", str(path), "-f", "chrome", "-o", str(out), cwd=tmp_path)
    ev = json.loads(out.read_text())["traceEvents"]
    track = [e for e in ev if e["ph"] == "C" and e["name"] == "memory.allocated_bytes:torch"]
    values = [e["args"][e["name"]] for e in track]
    assert len(track) >= 48 and max(values) - min(values) == 32 * MiB


def test_terminal_summary_shows_memory_and_counters(pattern_run, tmp_path):
    path, _ = pattern_run
    text = cli("summary", str(path), "--all-steps", cwd=tmp_path).stdout
    assert "Memory peak" in text and "Allocations live at the peak" in text
    assert "Memory by section" in text and "+96.0 MiB" in text and "-96.0 MiB" in text
    assert re.search(r"Counters.*\n(.*\n)*.*loss", text)


def test_timeline_agrees_with_torchs_export_memory_timeline(tmp_path):
    """polyprof's bytes held and torch's own memory timeline, from one run."""
    torch = pytest.importorskip("torch")
    import polyprof.torch as pt

    with pt.profile(profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(3):
            with polyprof.section("grow"):
                xs = [torch.ones(MiB) for _ in range(8)]
            del xs
            keep = torch.ones(3 * MiB)  # noqa: F841  (one 12 MiB tensor alive across steps)
    with pytest.warns(FutureWarning):  # torch deprecates it, but it is the reference
        prof.export_memory_timeline(str(tmp_path / "tl.json"))
    _, sizes = json.loads((tmp_path / "tl.json").read_text())
    torch_peak = float(np.asarray(sizes).sum(axis=1).max())
    tl = A.memory_timeline(prof.trace).to_pandas()
    cpu = tl[(tl["device"] == "/host:CPU").to_numpy()]
    ours = float(cpu["allocated_bytes"].max())
    assert torch_peak > 32 * MiB
    assert ours == pytest.approx(torch_peak, rel=0.01)


def test_opencl_buffers_and_images_on_the_device_timeline(tmp_path):
    pytest.importorskip("pyopencl")
    (tmp_path / "ocl.py").write_text(textwrap.dedent("""
        import numpy as np
        import pyopencl as cl
        import pyopencl.array as cla
        import polyprof

        ctx = cl.create_some_context(interactive=False)
        q = cl.CommandQueue(ctx)
        with polyprof.section("alloc"):
            bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 20) for _ in range(4)]
            arr = cla.to_device(q, np.ones(1 << 18, np.float32))
            fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
            img = cl.create_image(ctx, cl.mem_flags.READ_ONLY, fmt, shape=(64, 64))
            q.finish()
        with polyprof.section("free"):
            bufs[0].release()  # freed now, not when the object goes
            assert isinstance(bufs[1], cl.Buffer) and isinstance(img, cl.Image)
            del bufs, arr
        del img
    """))
    cli("run", "--memory", "--plugins", "opencl", "--no-summary", "-o", "o.polyprof", "ocl.py", cwd=tmp_path)
    t = polyprof.load(tmp_path / "o.polyprof")
    tl = A.memory_timeline(t).to_pandas()
    assert set(tl["device"]) == {"/device:OpenCL:0"} and set(tl["allocator"]) == {"opencl"}
    image = 64 * 64 * 16
    assert sorted(tl["bytes"][tl["bytes"] > 0].tolist()) == [image] + [MiB] * 5
    assert tl["bytes"].sum() == 0  # every allocation was released
    peak = A.memory_peak(t).to_pandas().iloc[0]
    assert peak["peak_bytes"] == 5 * MiB + image and peak["device"] == "/device:OpenCL:0"
    sec = A.section_stats(t).to_pandas().set_index("name")
    assert sec.loc["alloc", "alloc_bytes"] == 5 * MiB + image
    assert sec.loc["free", "mem_delta_bytes"] == -5 * MiB  # the image goes after the section
    # the explicit release comes before the other frees, inside "free"
    ev = t.events
    names = t.names()
    rel = np.flatnonzero(names == "clReleaseMemObject")
    free = next(i for i in range(t.n_events) if names[i] == "free")
    first = rel[np.argmin(ev["start_ns"][rel])]
    assert ev["start_ns"][free] <= ev["start_ns"][first] <= ev["start_ns"][free] + ev["dur_ns"][free]
    # and the counter track of an export sits on the OpenCL device's process
    from polyprof.formats.chrome import to_chrome_events

    out = to_chrome_events(t)
    pid = next(e["pid"] for e in out if e["ph"] == "M" and e["name"] == "process_name"
               and e["args"]["name"] == "/device:OpenCL:0")
    assert any(e["ph"] == "C" and e["pid"] == pid and e["name"].startswith("memory.allocated") for e in out)


def test_without_memory_option_no_opencl_memory_is_recorded(tmp_path):
    pytest.importorskip("pyopencl")
    import pyopencl as cl

    before = cl.Buffer
    with polyprof.profile(["opencl"]) as s:
        ctx = cl.create_some_context(interactive=False)
        cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096)
    assert cl.Buffer is before
    assert A.memory_timeline(s.trace).to_pandas().empty
    with polyprof.profile(["opencl"], memory=True) as s:
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096)
    assert cl.Buffer is before and type(buf) is before  # the program's objects are the real ones
    assert A.memory_timeline(s.trace).to_pandas()["bytes"].tolist() == [4096]


KINETO = {
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "fwd", "pid": 7, "tid": 7, "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 7, "tid": 7, "ts": 101.0, "dur": 5.0,
         "args": {"External id": 3}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 102.0,
         "args": {"Total Reserved": 2097152, "Total Allocated": 1049600, "Bytes": 1048576, "Device Id": 0,
                  "Device Type": 1, "Addr": 139800000000000}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 103.0,
         "args": {"Total Reserved": 0, "Total Allocated": 512, "Bytes": 512, "Device Id": -1,
                  "Device Type": 0, "Addr": 94000000000000}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 160.0,
         "args": {"Total Reserved": 2097152, "Total Allocated": 1024, "Bytes": -1048576, "Device Id": 0,
                  "Device Type": 1, "Addr": 139800000000000}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 110.0, "dur": 10.0,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ],
    "deviceProperties": [{"id": 0, "name": "A100"}],
}


def test_kineto_memory_events_typed_at_load_without_decoding_other_args(tmp_path):
    """A CUDA trace cannot be made here, so a small one written by hand in Kineto's shape."""
    path = tmp_path / "k.json"
    path.write_text(json.dumps(KINETO))
    t = polyprof.load(path)
    assert t.stats.pending == 1
    tl = A.memory_timeline(t).to_pandas()
    peak = A.memory_peak(t).to_pandas().set_index("device")
    assert t.stats.pending == 1  # the memory analyses read only the typed keys
    gpu = tl[(tl["device"] == "/device:GPU:0").to_numpy()]
    assert gpu["bytes"].tolist() == [1048576, -1048576]
    assert gpu["allocated_bytes"].tolist() == [1049600, 1024]  # the allocator's totals
    assert gpu["reserved_bytes"].tolist() == [2097152, 2097152]
    assert peak.loc["/device:GPU:0", "start_bytes"] == 1024  # held before the profile began
    assert peak.loc["/device:GPU:0", "peak_bytes"] == 1049600
    assert peak.loc["/host:CPU", "peak_bytes"] == 512
    assert {p.name for p in t.planes} >= {"/device:GPU:0", "/host:CPU"}
    live = A.memory_at_peak(t).to_pandas()
    row = live[(live["device"] == "/device:GPU:0").to_numpy()].iloc[0]
    assert (row["op"], row["section"], row["bytes"]) == ("aten::empty", "fwd", 1048576)
    # the args also stay under their own names
    assert t.stats["Bytes"].values.tolist() == [1048576, 512, -1048576]


def test_kineto_writer_round_trip_keeps_memory_events(pattern_run, tmp_path):
    path, _ = pattern_run
    t = polyprof.load(path)
    for fmt, name in (("kineto", "k.json"), ("xspace", "x.xplane.pb")):
        cli("export", str(path), "-f", fmt, "-o", name, cwd=tmp_path)
        back = polyprof.load(tmp_path / name)
        a, b = A.memory_peak(t).to_pandas(), A.memory_peak(back).to_pandas()
        assert b[["device", "start_bytes", "peak_bytes", "allocations"]].values.tolist() == \
            a[["device", "start_bytes", "peak_bytes", "allocations"]].values.tolist(), fmt
        # the derived counter is exported once, not again on a second export
        names = [back.strings[i] for i in back.counters["name"].tolist()]
        from polyprof.trace.memory import export_counters

        again = export_counters(back)
        assert len(again["ts_ns"]) == len(back.counters["ts_ns"]), fmt
        assert "memory.allocated_bytes:torch" in names


def _leaky(steps: int = 5, freed: bool = False):
    """A host thread that allocates 2 MiB per step inside section "cache" (kept unless
    ``freed``) plus 1 MiB of temporaries freed in the same step."""
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host")
    th = b.track(host, "main", tid=1)
    t = 0
    for s in range(steps):
        b.event(th, f"ProfilerStep#{s}", t, 1000, "user_annotation")
        b.event(th, "cache", t + 10, 100, "user_annotation")
        b.event(th, "alloc", t + 20, 0, keys.CAT_MEMORY, alloc_bytes=2 * MiB, addr=1000 + s)
        b.event(th, "alloc", t + 200, 0, keys.CAT_MEMORY, alloc_bytes=MiB, addr=5000 + s)
        b.event(th, "free", t + 300, 0, keys.CAT_MEMORY, alloc_bytes=-MiB, addr=5000 + s)
        if freed:
            b.event(th, "free", t + 900, 0, keys.CAT_MEMORY, alloc_bytes=-2 * MiB, addr=1000 + s)
        t += 1000
    return b.build()


def test_growth_step_over_step_is_a_finding_and_steady_memory_is_not():
    t = _leaky()
    levels = A.memory.step_levels(t)
    assert levels["held_bytes"].tolist() == [2 * MiB * (s + 1) for s in range(5)]
    found = {f.id: f for f in A.findings(t)}
    g = found["memory_growth"]
    assert g.evidence["per_step_bytes"] == 2 * MiB and g.evidence["steps"] == 5 and g.severity == "high"
    # the peak is held by "cache" (10 of the 11 MiB live there)
    held = found["memory_peak_held_by_one"].evidence
    assert held["holder"] == "cache" and held["held_bytes"] == 10 * MiB
    # the title's share is of what the window allocated and left live, and says so (it read
    # as a share of the whole peak: 66% of a 6.3 MiB peak held by 2.0 MiB)
    title = found["memory_peak_held_by_one"].title
    assert "allocated in the analysed steps and live at the" in title, title
    assert "memory_growth" not in {f.id for f in A.findings(_leaky(freed=True))}


def test_live_at_peak_pairs_frees_with_allocations_by_address():
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host")
    th = b.track(host, "main", tid=1)
    # address 1 is reused: allocated, freed, allocated again; the second block is live
    for ts, n, addr in ((10, 100, 1), (20, -100, 1), (30, 300, 1), (40, 50, 2), (50, 7, 3), (60, -7, 3),
                        (70, -50, 2)):
        b.event(th, "m", ts, 0, keys.CAT_MEMORY, alloc_bytes=n, addr=addr)
    t = b.build()
    p = A.memory_peak(t).to_pandas().iloc[0]
    assert (p["peak_bytes"], p["live_at_peak"], p["live_at_peak_bytes"], p["end_bytes"]) == (357, 3, 357, 300)
    assert p["from_allocator"] is False or p["from_allocator"] == 0
    live = A.memory_at_peak(t).to_pandas()
    assert live["bytes"].tolist() == [300, 50, 7] and live["ts_ns"].tolist() == [30, 40, 50]


def test_live_at_peak_without_addresses_pairs_frees_by_size():
    """Torch 1.8's [memory] events have no Addr: a free closes the latest open allocation
    of its size, so what is live at the peak adds up to the peak (every allocation made
    before the peak was counted live: 950 bytes live at a 650-byte peak)."""
    b = TraceBuilder()
    th = b.track(b.plane(keys.HOST_PLANE, "host"), "main", tid=1)
    for ts, n in ((10, 100), (20, 200), (30, -200), (40, 300), (50, 100), (60, -100), (70, 250), (80, -250),
                  (90, -300)):
        b.event(th, "m", ts, 0, keys.CAT_MEMORY, alloc_bytes=n)
    t = b.build()
    p = A.memory_peak(t).to_pandas().iloc[0]
    assert (p["peak_bytes"], p["live_at_peak"], p["live_at_peak_bytes"], p["end_bytes"]) == (650, 3, 650, 100)
    live = A.memory_at_peak(t).to_pandas()
    assert live["bytes"].tolist() == [300, 250, 100] and live["ts_ns"].tolist() == [40, 70, 10]


def test_section_memory_falls_back_to_rss_without_memory_events():
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host")
    th = b.track(host, "main", tid=1)
    b.event(th, "s", 100, 100, "section")
    b.counter(host, keys.COUNTER_RSS, np.array([0, 150, 300]), np.array([10.0, 40.0, 20.0]))
    row = A.section_stats(b.build()).to_pandas().iloc[0]
    assert row["mem_source"] == "rss" and np.isnan(row["alloc_bytes"])
    assert (row["mem_delta_bytes"], row["mem_min_bytes"], row["mem_max_bytes"]) == (30.0, 10.0, 40.0)
    assert row["mem_mean_bytes"] == pytest.approx((10 * 50 + 40 * 50) / 100)


def test_section_memory_change_counts_overlapping_instances_once():
    """Instances of one section that overlap in time (on two threads here; async tasks,
    recursion) share the process's memory: its change over their run counts once. Summed
    per instance, 2,000 overlapping asyncio tasks read +6.7 GiB of a 41.7 MiB process."""
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host")
    t1, t2 = b.track(host, "a", tid=1), b.track(host, "b", tid=2)
    b.event(t1, "s", 100, 200, "section")  # [100, 300)
    b.event(t2, "s", 200, 200, "section")  # [200, 400): overlaps the first
    b.event(t1, "s", 600, 100, "section")  # [600, 700): a run of its own
    b.counter(host, keys.COUNTER_RSS, np.array([0, 150, 250, 350, 650]), np.array([10.0, 20.0, 30.0, 40.0, 45.0]))
    row = A.section_stats(b.build()).to_pandas().iloc[0]
    # the run [100, 400): 40 - 10; the run [600, 700): 45 - 40 (not 20 + 30 + 5 per instance)
    assert row["count"] == 3 and row["mem_delta_bytes"] == 35.0
    assert (row["mem_min_bytes"], row["mem_max_bytes"]) == (10.0, 45.0)


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_memory_chart_renders_in_headless_chromium(pattern_run, tmp_path):
    path, _ = pattern_run
    html = tmp_path / "r.html"
    cli("report", str(path), "-o", str(html), "--all-steps", cwd=tmp_path)
    dom, log = browser.dump_dom(html)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root and "data-js-errors" not in root, root
    assert not [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    card = dom.split('id="memory-card"', 1)[1].split("</section>", 1)[0]
    path_d = re.search(r'<path d="([^"]+)"[^>]*class="series"', card).group(1)
    assert path_d.count("V") >= 48  # a step line through every allocation and free
    assert 'class="peak"' in card and "peak 32.0 MiB" in card
    assert card.count("<rect") >= 2 + 6  # every other step shaded, and the six section instances
    assert "aten::empty" in dom.split('id="memory-live-table"', 1)[1]
    png = browser.screenshot(html, tmp_path / "shot.png", height=2400)
    w, h, rows = browser.read_png(png)
    bpp = len(rows[0]) // w

    def count(color, tol=20):
        return sum(1 for row in rows for x in range(0, w * bpp, bpp)
                   if all(abs(row[x + i] - color[i]) <= tol for i in range(3)))

    assert count((0x3B, 0x73, 0xC4)) > 300, "no memory line painted"
    assert count((0xC0, 0x39, 0x2B)) > 5, "no peak marker painted"


_XPROF_MEMORY = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "memory_profile", {"use_saved_result": False})
print(data if isinstance(data, str) else data.decode())
"""


def test_xprof_memory_profile_shows_the_peak(pattern_run, tmp_path):
    """XProf (a real consumer) reads the XSpace polyprof writes: its memory_profile tool
    finds the 32 MiB peak and the eight allocations live at it."""
    pytest.importorskip("xprof")
    path, _ = pattern_run
    out = tmp_path / "p.xplane.pb"
    cli("export", str(path), "-f", "xspace", "-o", str(out), cwd=tmp_path)
    r = subprocess.run([sys.executable, "-c", _XPROF_MEMORY, str(out)], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["memoryIds"] == ["/host:CPU torch"]
    prof = doc["memoryProfilePerAllocator"]["/host:CPU torch"]
    assert int(prof["profileSummary"]["peakBytesUsageLifetime"]) == 32 * MiB
    assert sum(int(a["numOccurrences"]) for a in prof["activeAllocations"]) == 8
    # and polyprof reads its own file back without the XProf copy of the events
    back = polyprof.load(out)
    assert back.n_events == polyprof.load(path).n_events


def test_kineto_memory_events_with_odd_values(tmp_path):
    """A [memory] event whose Bytes is not an integer is not a memory event (the trace
    still loads, the arg is kept); an address in the upper half of 64 bits still pairs."""
    high = 2 ** 64 - 4096
    doc = {"traceEvents": [
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1.0,
         "args": {"Total Allocated": 10, "Bytes": "ten", "Addr": 5, "Device Type": 0}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2.0,
         "args": {"Total Allocated": 64, "Bytes": 64, "Addr": high, "Device Type": 0}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3.0,
         "args": {"Total Allocated": 0, "Bytes": -64, "Addr": high, "Device Type": 0}},
    ]}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    t = polyprof.load(path)
    tl = A.memory_timeline(t).to_pandas()
    assert tl["bytes"].tolist() == [64, -64]
    assert t.stats["Bytes"].values.tolist() == ["ten", "64", "-64"]  # mixed types: kept as text
    p = A.memory_peak(t).to_pandas().iloc[0]
    assert (p["peak_bytes"], p["live_at_peak"], p["end_bytes"]) == (64, 1, 0)


def test_torch_categories_when_torch_computes_them():
    """With record_shapes and with_stack (what torch's memory timeline needs) each
    allocation carries torch's own category; Adam's state is two tensors per parameter."""
    torch = pytest.importorskip("torch")
    import polyprof.torch as pt

    model = torch.nn.Linear(256, 256)
    opt = torch.optim.Adam(model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    with pt.profile(profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(3):
            model(torch.randn(64, 256)).sum().backward()
            opt.step()
            opt.zero_grad()
    tl = A.memory_timeline(prof.trace).to_pandas()
    cats = set(tl["category"])
    assert {"optimizer_state", "gradient", "activation"} <= cats
    state = tl[(tl["category"] == "optimizer_state").to_numpy()]
    assert 2 * param_bytes <= state["bytes"].sum() < 2 * param_bytes + 1024
    assert state["category_bytes"].iloc[-1] == state["bytes"].sum()
    # without them torch computes no categories: none are made up
    with pt.profile(profile_memory=True) as plain:
        model(torch.randn(64, 256)).sum().backward()
    assert set(A.memory_timeline(plain.trace).to_pandas()["category"]) == {""}


def test_perfetto_export_has_the_memory_counter_track(pattern_run, tmp_path):
    """Perfetto's own protos (the perfetto package) decode the counter track."""
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    import importlib.util

    from polyprof.writers import perfetto

    spec = importlib.util.spec_from_file_location("_perfetto_decoder", Path(__file__).parents[1] / "test_perfetto.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    Decoded = mod.Decoded

    path, _ = pattern_run
    d = Decoded(perfetto.write(polyprof.load(path), tmp_path / "p.pftrace").read_bytes())
    uuids = {u for u, _, _ in d.counters if d.tracks[u].name == "memory.allocated_bytes:torch"}
    assert len(uuids) == 1
    values = [v for u, _, v in d.counters if u in uuids]
    assert len(values) >= 48 and max(values) - min(values) == 32 * MiB


def _warm_up_only():
    """Three steps; the one memory event is in the first (the warm-up the default window leaves out)."""
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host")
    th = b.track(host, "main", tid=1)
    for s in range(3):
        b.event(th, f"ProfilerStep#{s}", s * 1000, 1000, "user_annotation")
    b.event(th, "alloc", 100, 0, keys.CAT_MEMORY, alloc_bytes=3 * MiB, addr=1)
    return b.build()


def test_memory_allocated_only_in_the_warm_up_step_does_not_break_the_summary():
    """Found by the random traces of tests/analysis/test_columnar.py: with three steps the
    summary leaves out the first (warm-up); a series whose every event falls in it has no
    event in the window, and its step levels indexed an empty array (IndexError). It
    holds, at the end of every analysed step, what it held when the window began."""
    from polyprof.report.tables import build

    t = _warm_up_only()
    report = build(t)  # the default window: steps 1 and 2
    assert report.overview["window"].startswith("steps 1-2 of 0-2")
    levels = A.memory.step_levels(polyprof.analyze.window.view(t, "auto"))
    assert levels["step"].tolist() == [1, 2] and levels["held_bytes"].tolist() == [3 * MiB, 3 * MiB]


def test_html_memory_chart_of_a_series_with_no_event_in_the_window():
    """The same trace's HTML report (its memory chart indexed the series' first event):
    the series is drawn flat at what it held, across the analysed window."""
    from polyprof.report.html import page_data
    from polyprof.report.tables import build

    series = page_data(build(_warm_up_only()))["memory"]["series"]
    assert [(x["ts"], x["values"]) for x in series] == [([1000, 3000], [3 * MiB, 3 * MiB])]


def test_frees_of_memory_allocated_before_the_profile_never_make_held_bytes_negative():
    """Without the allocator's totals, a series that first frees 4 MiB allocated before
    the profile held at least 4 MiB then: it starts there, so the 10 MiB allocated after
    that free peak at 10 MiB (not 6, less than the 10 MiB live then), and nothing held is
    ever below zero."""
    b = TraceBuilder()
    th = b.track(b.plane(keys.HOST_PLANE, "host"), "main", tid=1)
    b.event(th, "sec", 0, 1000, "user_annotation")
    b.event(th, "free", 100, 0, keys.CAT_MEMORY, alloc_bytes=-4 * MiB, addr=1)
    b.event(th, "alloc", 200, 0, keys.CAT_MEMORY, alloc_bytes=10 * MiB, addr=2)
    b.event(th, "free", 300, 0, keys.CAT_MEMORY, alloc_bytes=-10 * MiB, addr=2)
    t = b.build()
    pk = A.memory_peak(t).to_pandas().iloc[0]
    assert (pk["start_bytes"], pk["peak_bytes"], pk["end_bytes"]) == (4 * MiB, 10 * MiB, 0)
    assert pk["live_at_peak_bytes"] <= pk["peak_bytes"]
    assert A.memory_timeline(t).to_pandas()["allocated_bytes"].tolist() == [0, 10 * MiB, 0]
    sec = A.section_stats(t).to_pandas().set_index("name").loc["sec"]
    assert (sec["mem_min_bytes"], sec["mem_max_bytes"], sec["mem_delta_bytes"]) == (0, 10 * MiB, -4 * MiB)


def test_an_allocation_in_a_tensor_factory_is_its_callers(tmp_path):
    """The KINETO trace's aten::empty inside an aten::linear: the memory at the peak is
    the linear's (what holds it, and what the peak finding names); an aten::empty with no
    op around it stays itself."""
    doc = json.loads(json.dumps(KINETO))
    doc["traceEvents"].insert(1, {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 7, "tid": 7,
                                  "ts": 100.5, "dur": 20.0})
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    live = A.memory_at_peak(polyprof.load(path)).to_pandas()
    assert live[(live["device"] == "/device:GPU:0").to_numpy()].iloc[0]["op"] == "aten::linear"
    (tmp_path / "alone.json").write_text(json.dumps(KINETO))
    live = A.memory_at_peak(polyprof.load(tmp_path / "alone.json")).to_pandas()
    assert live[(live["device"] == "/device:GPU:0").to_numpy()].iloc[0]["op"] == "aten::empty"


def test_the_peak_finding_of_a_real_trace_names_the_op_not_the_factory():
    """TraceLens's MI300 trace (Falconsai NSFW detection): 94% of the bytes live at the GPU's
    peak were made for aten::addmm (its aten::empty's), which the finding names."""
    t = polyprof.load(Path(__file__).parents[1] / "data" / "peers" / "tracelens_perf"
                      / "mi300_Falconsai_nsfw_image_detection__1016002.json.gz")
    f = {x.id: x for x in A.findings(t, window="auto")}["memory_peak_held_by_one"]
    assert f.evidence["holder"] == "aten::addmm" and f.evidence["share_pct"] == pytest.approx(94, abs=1)
