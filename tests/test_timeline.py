"""The HTML report's interactive timeline: its data (report/timeline.py) and the page
driven in headless Chromium over the DevTools protocol (wheel zoom, drag pan, W/S/A/D,
click on a kernel, search), on a real Kineto trace of an A100 run."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest

from polyprof.analyze.critical_path_track import with_critical_path
from polyprof.derive import cache
from polyprof.formats.detect import load
from polyprof.report import timeline as tl
from polyprof.report.html import write
from polyprof.report.timeline import Part, timeline_data
from polyprof.trace.categories import Kind

from analysis.browser import chromium, read_png

ALEXNET = "kineto/a100_alexnet_small.json.gz"


def _columns(d: dict) -> dict[str, np.ndarray]:
    raw = zlib.decompress(base64.b64decode(d["blob"]))
    types = {"u2": "<u2", "i4": "<i4", "f8": "<f8"}
    return {c["name"]: np.frombuffer(raw, types[c["dtype"]], c["length"], c["offset"]) for c in d["layout"]}


def _fmt_ns(v: float) -> str:
    """The page's fmtNs."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:#.4g} {unit}".replace(". ", " ")
    return f"{round(v)} ns"


@pytest.fixture(scope="module")
def alexnet(traces_dir):
    return load(traces_dir / ALEXNET)


def test_every_event_of_every_track_on_its_lane(alexnet):
    t = alexnet
    d = timeline_data([Part("", t)])
    c = _columns(d)
    q = d["quantum"]
    assert q == 1000  # Kineto's microseconds
    start = np.cumsum(c["start"].astype(np.int64)) * q
    dur = c["dur"].astype(np.int64) * q
    # the trace's events, and each step's critical path as one more track
    cp = [x for x in d["tracks"] if x["label"] == "critical path"]
    assert len(cp) == 1 and cp[0]["kind"] == "derived"
    on_cp = np.zeros(len(start), bool)
    on_cp[cp[0]["lanes"][0]:cp[0]["lanes"][-1]] = True
    assert d["events"] == t.n_events + on_cp.sum() == len(start)
    cp_names = {d["names"][i] for i in c["name"][on_cp]}
    assert cp_names & set(t.names().tolist())  # the path's stretches are named after the events they follow
    # the multiset of (name, start, duration) off the path is the trace's, on the timeline's clock
    keep = ~on_cp
    got = sorted(zip([d["names"][i] for i in c["name"][keep]], (start + d["t0"])[keep].tolist(),
                     dur[keep].tolist()))
    want = sorted(zip(t.names().tolist(), t.events["start_ns"].tolist(), t.events["dur_ns"].tolist()))
    assert got == want
    # every track with events is there, and within a lane of a thread events do not overlap
    assert {(x["group"], x["label"]) for x in d["tracks"] if x["label"] != "critical path"} == {
        (t.planes[t.tracks[k].plane].name, t.tracks[k].name) for k in np.unique(t.events["track"])}
    for x in d["tracks"]:
        lanes = x["lanes"]
        assert lanes == sorted(lanes)
        for lo, hi in zip(lanes[:-1], lanes[1:]):
            s, e = start[lo:hi], start[lo:hi] + dur[lo:hi]
            assert (np.diff(s) >= 0).all()
            if x["kind"] == "thread":
                assert (s[1:] >= e[:-1]).all(), x["label"]
    # a kernel points at its launch, and the launch back at a kernel
    corr = cache.correlation(t)
    k = int(corr.device_rows[corr.launch >= 0][0])
    names = np.array(d["names"])[c["name"]]
    pos = np.flatnonzero((names == t.names()[k]) & (start + d["t0"] == t.events["start_ns"][k]) & keep)[0]
    launch = int(corr.launch[corr.device_rows == k][0])
    assert names[c["partner"][pos]] == t.strings[t.events["name"][launch]]
    assert c["partner"][c["partner"][pos]] >= 0


def test_past_the_budget_the_shortest_events_are_left_out_with_a_note(alexnet, monkeypatch):
    monkeypatch.setattr(tl, "MAX_EVENTS", 200)
    d = timeline_data([Part("", alexnet)])
    c = _columns(d)
    assert d["events"] <= 200 and "left out of the timeline" in d["note"]
    kept = c["dur"].astype(np.int64) * d["quantum"]
    assert kept.min() >= np.sort(alexnet.events["dur_ns"])[::-1][199]
    assert d["tracks"] and d["tracks"][-1]["lanes"][-1] == d["events"]
    assert all(p < d["events"] for p in c["partner"])


def test_integers_a_double_cannot_hold_are_text(traces_dir):
    """The TPU sample's ``_c`` and ``_p`` (ids, hashes) and ``program_id`` (uint64) pass
    2**53: as JSON numbers the page's JSON.parse rounded them (-3880263273729238021 shown
    as -3880263273729238000); they are text, the others numbers."""
    trace = load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb")
    args = timeline_data([Part("", trace)])["args"]
    cols = dict(zip(args["keys"], args["cols"]))
    for key in ("_c", "_p", "program_id"):
        vals = cols[key][1]
        assert {int(v) for v in vals} <= set(trace.stats[key].values.tolist())  # exact, as text or number
        assert any(isinstance(v, str) for v in vals)
        assert all(isinstance(v, str) == (abs(int(v)) > 2 ** 53) for v in vals)
    assert all(isinstance(v, int) for v in cols["flops"][1])


@pytest.mark.parametrize("name", ["h200/torch_cuda_graph_h200.json.gz", "traces/kineto/triton_example.json.gz"])
def test_each_plane_is_one_group(name):
    """The critical path's line sits on a copy of its host plane (same name): it was drawn
    after the other host planes under a second "/host:CPU" heading."""
    from pathlib import Path

    d = timeline_data([Part("", load(Path(__file__).parent / "data" / name))])
    groups = [t["group"] for t in d["tracks"]]
    heads = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
    assert len(heads) == len(set(heads)) and "critical path" in {t["label"] for t in d["tracks"]}, heads


def test_ranks_on_one_clock(alexnet):
    d = timeline_data([Part("rank 0", alexnet), Part("rank 1", alexnet, 5_000_000)])
    one = timeline_data([Part("", alexnet)])["events"]  # with its critical path
    assert d["events"] == 2 * one
    groups = {x["group"].split(" · ")[0] for x in d["tracks"]}
    assert groups == {"rank 0", "rank 1"}
    assert d["t0"] == alexnet.span_ns[0] and d["span_ns"] == alexnet.span_ns[1] - alexnet.span_ns[0] + 5_000_000


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_zoom_pan_click_and_search_in_chromium(alexnet, tmp_path):
    import cdp

    out = write(alexnet, tmp_path / "r.html")
    kern = alexnet.rows_of_kind(Kind.KERNEL)
    k = int(kern[np.argmax(alexnet.events["dur_ns"][kern])])
    kname, kdur = alexnet.strings[alexnet.events["name"][k]], int(alexnet.events["dur_ns"][k])
    page = cdp.Page(chromium())
    try:
        page.open(out, "document.documentElement.getAttribute('data-tl-ready')")
        assert page.eval("window.__errors.length") == 0
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        box = page.eval("(function(){var r=document.getElementById('tl-canvas').getBoundingClientRect();"
                        "return [r.left, r.top, r.width, r.height]})()")
        x, y = box[0] + 240 + (box[2] - 240) * 0.6, box[1] + 80
        r0 = page.eval("window.__timeline.range()")
        # the wheel over the plot narrows the visible range, around the pointer
        page.mouse("mouseWheel", x, y, deltaX=0, deltaY=-300)
        r1 = page.eval("window.__timeline.range()")
        assert r1[1] - r1[0] < 0.7 * (r0[1] - r0[0])
        assert r1[0] > r0[0] and r1[1] < r0[1]
        # a drag to the right shows earlier times: the same width, moved left
        page.mouse("mousePressed", x, y, button="left", clickCount=1)
        page.mouse("mouseMoved", x + 100, y, button="left")
        page.mouse("mouseMoved", x + 200, y, button="left")
        page.mouse("mouseReleased", x + 200, y, button="left", clickCount=1)
        r2 = page.eval("window.__timeline.range()")
        assert r2[1] - r2[0] == pytest.approx(r1[1] - r1[0])
        assert r2[0] == pytest.approx(r1[0] - 200 / (box[2] - 246) * (r1[1] - r1[0]), rel=1e-6)
        # W zooms in, S out, D pans right (as in Perfetto)
        page.key("w")
        r3 = page.eval("window.__timeline.range()")
        assert r3[1] - r3[0] < r2[1] - r2[0]
        page.key("d")
        r4 = page.eval("window.__timeline.range()")
        assert r4[0] > r3[0] and r4[1] - r4[0] == pytest.approx(r3[1] - r3[0])
        page.key("s")
        assert page.eval("window.__timeline.range()[1] - window.__timeline.range()[0]") > r4[1] - r4[0]
        # a click on the longest kernel (brought into view) shows its name and duration
        pos = page.eval(f"window.__timeline.find({kname!r})")
        assert pos >= 0
        page.eval(f"window.__timeline.show({pos})")
        at = page.eval(f"window.__timeline.where({pos})")
        page.mouse("mousePressed", at["x"], at["y"], button="left", clickCount=1)
        page.mouse("mouseReleased", at["x"], at["y"], button="left", clickCount=1)
        text = page.eval("document.getElementById('tl-details').innerText")
        assert kname in text and _fmt_ns(kdur) in text, text
        assert "launched by" in text  # its launch, found by correlation
        # search finds an op and selects it
        page.eval("document.getElementById('tl-search').focus()")
        page.call("Input.insertText", text="aten::conv2d")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13)
        found = page.eval("document.getElementById('tl-found').textContent")
        assert found.startswith("match 1 of ")
        # the ops themselves, not the critical path's stretches named after them
        assert int(found.split()[-1]) == int((alexnet.names() == "aten::conv2d").sum()) > 0
        assert int((with_critical_path(alexnet).names() == "aten::conv2d").sum()) > int(found.split()[-1])
        assert "aten::conv2d" in page.eval("document.getElementById('tl-details').innerText")
        # an op's device work: the activities correlation gives it, counted in its details
        corr = cache.correlation(alexnet)
        op_row = int(np.bincount(corr.op[corr.op >= 0]).argmax())
        n_work = int((corr.op == op_row).sum())
        op_name = alexnet.strings[alexnet.events["name"][op_row]]
        at = int(alexnet.events["start_ns"][op_row] - alexnet.span_ns[0])
        starts = page.eval(f"window.__timeline.find({op_name!r}, {at})")
        assert starts >= 0
        page.eval(f"window.__timeline.select({starts}, true)")
        text = page.eval("document.getElementById('tl-details').innerText")
        assert f"{n_work} activities" in text, text
        # the screenshot of the timeline is not blank: many colours where events are drawn
        page.eval("window.__timeline.zoom(1e9)")  # the whole span again
        box = page.eval("(function(){var r=document.getElementById('tl-canvas').getBoundingClientRect();"
                        "return [r.left + scrollX, r.top + scrollY, r.width, r.height]})()")  # page coordinates
        png = page.screenshot(tmp_path / "tl.png", {"x": box[0] + 240, "y": box[1] + 30, "width": box[2] - 250,
                                                    "height": box[3] - 40})
        w, h, rows = read_png(png)
        bpp = len(rows[0]) // w
        pixels = {bytes(row[i:i + 3]) for row in rows for i in range(0, len(row), bpp)}
        assert len(pixels) > 20
        painted = sum(1 for row in rows for i in range(0, len(row), bpp) if row[i:i + 3] != b"\xff\xff\xff")
        assert painted > 0.02 * w * h
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_a_kernel_named_as_the_tables_name_it_finds_its_stream_events(traces_dir, tmp_path):
    """JAX's H200 train step: the kernels table names an XLA kernel ``jit_step/gemm_fusion_dot``,
    as the critical path's copies do, while its events on the stream are named without the
    module: the table's name found the copies alone (1 of 3582 on a transformer)."""
    import cdp

    trace = load(traces_dir.parent / "h200" / "jax_train_step_h200.xplane.pb")
    out = write(trace, tmp_path / "r.html")
    names = trace.names()
    on_stream = int(sum(1 for i in trace.rows_of_kind(Kind.KERNEL).tolist() if names[i] == "gemm_fusion_dot"))
    assert on_stream > 0
    page = cdp.Page(chromium())
    try:
        page.open(out, "document.documentElement.getAttribute('data-tl-ready')")
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        page.eval("document.getElementById('tl-search').focus()")
        page.call("Input.insertText", text="jit_step/gemm_fusion_dot")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13)
        found = page.eval("document.getElementById('tl-found').textContent")
        n = int(found.split()[-1])
        # the kernels whose names hold it (gemm_fusion_dot, _1, _2...) on their streams, no copy
        assert found.startswith("match 1 of ") and n >= on_stream, found
        assert "critical path" not in page.eval("document.getElementById('tl-details').innerText")
    finally:
        page.close()
