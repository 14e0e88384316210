"""Terminal summary, --json, SQL and the HTML report (opened in headless Chromium)."""

from __future__ import annotations

import functools
import itertools
import json
import re
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main
from polyprof.report.html import write

from . import browser
from .synth import gpu_trace


@pytest.fixture()
def synth_file(tmp_path):
    return gpu_trace().save(tmp_path / "synth.polyprof")


def test_summary_terminal_shows_breakdowns_findings_and_unmatched(synth_file, capsys):
    assert main(["summary", str(synth_file)]) == 0
    out = capsys.readouterr().out
    for text in ("Findings", "Device time", "Idle time by cause", "Top device activity", "Sections", "Steps",
                 "unmatched 0", "host-wait"):
        assert text in out, text


def test_summary_json_has_every_table_and_finding(synth_file, capsys):
    assert main(["summary", str(synth_file), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["tables"]) >= {"temporal_breakdown", "idle_time_breakdown", "kernel_breakdown", "op_stats",
                                  "launch_stats", "comm_comp_overlap", "section_stats", "step_stats"}
    assert doc["overview"]["correlation"]["unmatched_device_activities"] == 0
    kern = {r["name"]: r for r in doc["tables"]["kernel_breakdown"]["records"]}
    assert kern["gemm"]["total_ns"] == 200_000
    assert {f["id"] for f in doc["findings"]} >= {"host_bound", "copy_bound"}
    assert all(f["suggestion"] and f["evidence"] for f in doc["findings"])


def test_sql_over_events(synth_file, capsys):
    q = ("SELECT name, count(*) AS n, sum(dur_ns) AS total FROM events WHERE category = 'kernel' "
         "GROUP BY name ORDER BY total DESC")
    assert main(["sql", str(synth_file), q, "--csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].replace('"', "") == "name,n,total"
    assert lines[1].replace('"', "") == "gemm,2,200000"
    assert main(["sql", str(synth_file), "SELECT count(*) FROM events WHERE track = 'Framework Ops'", "--derive",
                 "--csv"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[1] == "4"
    assert main(["sql", str(synth_file), "SELEC nonsense"]) == 1


def test_report_command_writes_one_offline_file(synth_file, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", str(synth_file), "-o", str(out)]) == 0
    text = out.read_text()
    assert "<script" in text and "<canvas" in text
    # self-contained: no external scripts, styles or fetches
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "@import" not in text


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_renders_in_headless_chromium_without_errors(tmp_path):
    html = write(gpu_trace(), tmp_path / "report.html")
    dom, log = browser.dump_dom(html)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root, "the report script did not finish"
    assert "data-js-errors" not in root, root
    console = [l for l in log.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    assert not console, console
    # the charts exist in the DOM with content: SVG bars with nonzero width, tables filled
    for chart in ("temporal-chart", "idle-chart", "kernels-chart", "steps-chart"):
        block = dom.split(f'id="{chart}"', 1)[1].split("</section>", 1)[0]
        widths = [float(w) for w in re.findall(r'<rect[^>]*width="([0-9.]+)"', block)]
        assert widths and max(widths) > 10, chart
    assert "aten::linear" in dom.split('id="ops-table"', 1)[1]
    # and the screenshot shows them: the timeline canvas and the charts paint the data colours
    png = browser.screenshot(html, tmp_path / "shot.png")
    w, h, rows = browser.read_png(png)
    bpp = len(rows[0]) // w

    def count(color, tol=12):
        n = 0
        for row in rows:
            for x in range(0, w * bpp, bpp):
                if all(abs(row[x + i] - color[i]) <= tol for i in range(3)):
                    n += 1
        return n

    # the page at half scale (700 px wide): bars of the data colours cover thousands of pixels
    compute_blue, copy_orange = (0x3B, 0x73, 0xC4), (0xE8, 0x91, 0x3A)
    assert count(compute_blue) > 500, "no compute bars painted"
    assert count(copy_orange) > 200, "no copy bars painted"


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_of_the_v100_trace_renders_without_errors(kineto_files, tmp_path):
    pytest.importorskip("polyprof.formats.kineto")
    path = next(p for p in kineto_files if p.name.startswith("v100"))
    out = tmp_path / "v100.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    dom, log = browser.dump_dom(out)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root and "data-js-errors" not in root, root
    assert not [l for l in log.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    # kernel names full of <, >, & arrive as text, not markup
    assert "Optimizer.step#SGD.step" in dom.split('id="sections-table"', 1)[1]
    assert "v100_ns_resolution_rank0.json.gz" in dom.split("<title>", 1)[1].split("</title>", 1)[0]


def test_export_with_derived_lines(synth_file, tmp_path):
    import orjson

    out = tmp_path / "t.json"
    assert main(["export", str(synth_file), "-f", "chrome", "--derive", "-o", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())["traceEvents"]
    threads = {e["args"]["name"] for e in doc if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"Steps", "Sections", "Framework Ops", "stream 7"} <= threads


def _render80(trace) -> list[str]:
    import io

    from rich.console import Console

    from polyprof.report.tables import build
    from polyprof.report.terminal import render

    buf = io.StringIO()
    render(build(trace), console=Console(file=buf, width=80, color_system=None))
    return buf.getvalue().splitlines()


def test_terminal_tables_at_80_columns_never_cut_numbers_or_their_headers():
    import pandas as pd

    from polyprof.report.grid import _table
    from polyprof.report.terminal import fmt_ns

    df = pd.DataFrame({"plane": ["/device:OpenCL:0", "/device:OpenCL:1"],
                       "launch_name": ["clEnqueueNDRangeKernel", "clEnqueueUnmapMemObject"],
                       "count": [24, 6], "cpu": [559_000.0, 65_500.0], "dev": [2_560_000.0, 550.0],
                       "delay": [3_480_000.0, 33_400.0], "p99": [25_400_000.0, 152_000.0]})
    cols = [("plane", "device", None), ("launch_name", "launch call", None), ("count", "count", str),
            ("cpu", "CPU mean", fmt_ns), ("dev", "device mean", fmt_ns), ("delay", "delay median", fmt_ns),
            ("p99", "delay p99", fmt_ns, True)]
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(_table("Launches", df, cols, 15, 80))
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80
    for text in ("CPU mean", "device mean", "delay median", "559 µs", "65.5 µs", "2.56 ms", "550 ns", "3.48 ms",
                 "33.4 µs", "24", "clEnqueue"):
        assert text in out, (text, out)


def test_terminal_table_columns_line_up_with_wide_characters_and_long_names():
    import io

    import pandas as pd
    from rich.cells import cell_len
    from rich.console import Console

    from polyprof.report.grid import _table
    from polyprof.report.terminal import fmt_ns

    df = pd.DataFrame({"name": ["畳み込み層の前向き計算", "x" * 90, "plain"], "total_ns": [1e6, 2e3, 5.0]})
    buf = io.StringIO()
    Console(file=buf, width=60, color_system=None).print(
        _table("Wide", df, [("name", "name", None), ("total_ns", "total", fmt_ns)], 15, 60))
    lines = buf.getvalue().splitlines()
    assert lines[0] == "Wide"
    body = lines[1:]
    assert len(body) == 2 + 1 + 1 + 3  # top, header, rule, rows, bottom
    assert len({cell_len(line) for line in body}) == 1, body  # every line as wide, in terminal cells
    assert cell_len(body[0]) <= 60
    assert "畳み込み層の前向き計算" in buf.getvalue()
    assert "x…" in buf.getvalue() and "x" * 60 not in buf.getvalue()
    assert body[-2].rstrip("│ ").endswith("5 ns") and body[1].split("┃")[2].strip() == "total"


def test_terminal_summary_at_80_columns_is_readable():
    from .synth import pipeline_trace

    lines = _render80(pipeline_trace(sync_us=3000, kernel_us=300))
    assert max(len(line) for line in lines) <= 80
    # one device: its name moves to the table title instead of a squeezed column
    assert any(line.startswith("Launches") and "/device:GPU:0" in line for line in lines)
    launches = lines[next(i for i, line in enumerate(lines) if line.startswith("Launches")):]
    assert any("cudaLaunchKernel" in line and "µs" in line for line in launches)
    # wrapped finding text stays indented under its label
    panel = lines[next(i for i, line in enumerate(lines) if "Findings" in line) + 1:]
    panel = panel[:next(i for i, line in enumerate(panel) if line.startswith("╰"))]
    body = [line[2:] for line in panel if not line[2:].startswith("●")]
    assert body and all(line.startswith("  ") for line in body), "\n".join(panel)


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_of_a_cpu_only_trace_has_no_empty_device_panels(tmp_path):
    from polyprof.trace import TraceBuilder

    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    for k in range(3):
        o = k * 1_000_000
        b.event(th, f"ProfilerStep#{k}", o, 900_000, "user_annotation")
        b.event(th, "aten::matmul", o + 100_000, 600_000, "cpu_op")
    html = write(b.build(), tmp_path / "cpu.html")
    dom, log = browser.dump_dom(html)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root and "data-js-errors" not in root, root
    assert not [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    for card in ("temporal-card", "idle-card", "kernels-card", "kernels-table-card", "overlap-card"):
        assert f'id="{card}"' not in dom, card
    assert '<div class="muted">No device activity in this trace.</div>' not in dom
    assert "none in this trace" in dom.split('id="overview"', 1)[1]
    # the steps chart shows each step's host time, not a device "idle" bar
    steps = dom.split('id="steps-chart"', 1)[1].split("</section>", 1)[0]
    assert "#3b73c4" in steps and "#d9dde3" not in steps
    assert "host time of the step" in steps
    # and the steps table gives the steps' host time, not a device's busy and idle time
    table = dom.split('id="steps-table"', 1)[1].split("</section>", 1)[0]
    assert ">step<" in table and ">host<" in table and ">idle<" not in table and ">busy<" not in table, table
    # a chart alone in its row keeps its text size (the SVG scales with its width)
    assert re.search(r"svg\.chart-svg \{[^}]*max-width", html.read_text())


def _summary_text(trace, width: int) -> str:
    import io

    from rich.console import Console

    from polyprof.report.terminal import print_summary

    buf = io.StringIO()
    print_summary(trace, console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_summary_shows_other_plugins_events_next_to_device_tables():
    """A plugin's own events (e.g. a native plugin's per-thread CPU time) appear in the
    summary even when the trace also has device activity."""
    from polyprof.trace import TraceBuilder

    t = gpu_trace()
    b = TraceBuilder()
    plane = b.plane("/host:procstat", "host")
    tr = b.track(plane, "worker", "thread", tid=5)
    b.event(tr, "worker", 10_000, 300_000, "thread_cpu")
    from polyprof.trace import merge

    out = _summary_text(merge([t, b.build()]), 160)
    assert "Top device activity" in out
    assert "thread_cpu" in out, out


def test_summary_prints_names_and_errors_as_they_are():
    """Names and plugin errors are text, not rich markup or emoji codes."""
    from polyprof.trace import TraceBuilder

    b = TraceBuilder(metadata={"plugin_errors": [
        {"plugin": "[bold]odd", "phase": "collect", "error": "RuntimeError: bad [/] tag :fire:"}]})
    th = b.track(b.plane("/host:CPU", "host"), "main", "thread", tid=1)
    b.event(th, "load :smile: [red]batch[/]", 0, 1000, "section")
    out = _summary_text(b.build(), 160)
    assert "load :smile: [red]batch[/]" in out, out
    assert "plugin [bold]odd failed in collect: RuntimeError: bad [/] tag :fire:" in out, out


def test_finding_titles_print_names_as_they_are():
    """A finding's title names a thread: an emoji code in the name stays text there too."""
    from polyprof.trace import TraceBuilder

    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host"), "loader :fire:", "thread", tid=1)
    b.event(th, "step", 0, 1000, "section")
    b.event(th, "cudaStreamSynchronize", 100, 800, "cuda_runtime")
    out = _summary_text(b.build(), 160)
    assert "thread loader :fire: spends 80%" in out, out


def test_summary_shows_trace_warnings():
    from polyprof.trace import TraceBuilder

    b = TraceBuilder(metadata={"warnings": ["opencl: 1 OpenCL commands still pending 10 s after stop"]})
    th = b.track(b.plane("/host:CPU", "host"), "main", "thread", tid=1)
    b.event(th, "s", 0, 1000, "section")
    out = _summary_text(b.build(), 160)
    assert "still pending" in out, out


def _opencl_like_trace():
    """Long device and launch-call names, as the OpenCL plugin writes them."""
    from polyprof.trace import TraceBuilder

    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host"), "MainThread", "thread", tid=1)
    q = b.track(b.plane("/device:OpenCL:0", "device"), "Queue 0", "queue", tid=0)
    t, corr = 0, 1
    for _k in range(6):
        b.event(th, "a section with a rather long name", t, 900_000, "section")
        for call, dev, cat in (("clEnqueueNDRangeKernel", "blur_horizontal_kernel", "kernel"),
                               ("clEnqueueUnmapMemObject", "UnmapMemObject", "opencl_map"),
                               ("clEnqueueWriteBuffer", "WriteBuffer (HtoD)", "gpu_memcpy")):
            b.event(th, call, t + 1000, 97_432, "opencl_api", correlation_id=corr)
            b.event(q, dev, t + 200_000, 1_234_567, cat, correlation_id=corr)
            t += 2_000_000
            corr += 1
    return b.build()


def test_summary_on_a_narrow_terminal_never_truncates_numbers():
    out = _summary_text(_opencl_like_trace(), 80)
    for line in out.splitlines():
        assert len(line) <= 80
    # numeric cells are whole: an ellipsis may shorten names, never a figure
    assert not re.search(r"\d…", out), out
    # the sections caption names only the columns the table shows
    sec = out[out.index("Sections"):]
    table, caption = sec.split("total..", 1)
    for col in ("projected", "util", "Δmem"):
        if f"{col} =" in caption.split("\n\n")[0]:
            assert col in table, (col, out)


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_shows_trace_warnings(tmp_path):
    t = gpu_trace()
    t.metadata["warnings"] = ["opencl: 1 OpenCL commands still pending 10 s after stop"]
    html = write(t, tmp_path / "report.html")
    dom, _ = browser.dump_dom(html)
    assert 'data-rendered="1"' in re.search(r"<html[^>]*>", dom).group(0)
    assert "still pending 10 s after stop" in dom.split("</script>")[-1] or \
        "still pending 10 s after stop" in re.sub(r"<script.*?</script>", "", dom, flags=re.S)


def _table_names(lines: list[str], title: str) -> list[str]:
    """The name cells (first column) of the table titled ``title`` in rendered lines."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 4:]:
        if not line.startswith("│"):
            break
        rows.append(line.split("│")[1].strip())
    return rows


def test_kernel_names_at_80_columns_stay_apart(kineto_files):
    """The A100 trace's fft2d_r2c kernels differ only in mid-template ("5u, true" and
    "0u, false"): at 80 columns every row of the device table is still its own name."""
    import polyprof
    import polyprof.analyze as A

    path = next(p for p in kineto_files if p.name.startswith("a100_alexnet"))
    trace = polyprof.load(path)
    lines = _render80(trace)
    assert max(len(line) for line in lines) <= 80
    shown = _table_names(lines, "Top device activity")
    full = A.kernel_breakdown(trace)["name"][: len(shown)].tolist()
    assert len(shown) == 15 and len(set(full)) == len(full)
    assert len(set(shown)) == len(shown), shown
    for s, f in zip(shown, full):  # each cell is pieces of its own name, in order
        pieces = [p for p in s.split("…") if p]
        pos = 0
        for p in pieces:
            pos = f.find(p, pos)
            assert pos >= 0, (s, f)
            pos += len(p)
    r2c = [s for s in shown if "fft2d_r2c" in s]
    assert len(r2c) == 2 and any("5u" in s for s in r2c) and any("0u" in s for s in r2c), r2c


def test_fit_texts_keeps_rows_apart():
    from rich.cells import cell_len

    from polyprof.report.fit import fit_texts

    names = ["void kernel<float, 128>(float*, int)", "void kernel<float, 256>(float*, int)",
             "void kernel<half, 128>(half*, int)", "short"]
    for width in (12, 16, 24):
        out = fit_texts(names, width)
        assert all(cell_len(o) <= width for o in out), out
        assert len(set(out)) == len(names), (width, out)
    assert fit_texts(names, 40) == names  # what fits is left alone


def test_tpu_summary_does_not_call_unlaunched_ops_unmatched(traces_dir):
    """A TPU runs whole compiled programs: no host launch calls, so nothing is 'unmatched'."""
    import polyprof

    trace = polyprof.load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb")
    text = "\n".join(_render80(trace))
    assert "no host launch calls in this trace" in text, text[:2000]
    assert "unmatched" not in text
    # a GPU trace with launches still reports its matching
    assert "unmatched 0" in "\n".join(_render80(gpu_trace()))


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_of_a_tpu_trace_says_there_are_no_launches(traces_dir, tmp_path):
    out = tmp_path / "tpu.html"
    assert main(["report", str(traces_dir / "xspace" / "tpu_inference_2.xplane.pb"), "-o", str(out)]) == 0
    dom, _ = browser.dump_dom(out)
    body = re.sub(r"<script.*?</script>", "", dom, flags=re.S)
    assert 'data-rendered="1"' in re.search(r"<html[^>]*>", dom).group(0)
    assert "no host launch calls in this trace" in body
    assert "device activities without a launch" not in body


def test_kernel_states_and_queue_length_in_every_summary(kineto_files, tmp_path, capsys):
    """HTA's two tables, in the terminal summary and the HTML report, with the numbers
    of kernel_state_breakdown and queue_length_summary (checked against HTA itself in
    tests/test_hta_export.py)."""
    from polyprof.analyze.kernel_states import kernel_state_breakdown
    from polyprof.analyze.queues import queue_length_summary
    from polyprof.report.terminal import fmt_ns

    path = next(p for p in kineto_files if p.name.startswith("a100_nccl"))
    t = polyprof.load(path)
    ks = kernel_state_breakdown(t, window="auto").to_pandas().set_index("state")
    ql = queue_length_summary(t, window="auto")
    assert main(["summary", str(path)]) == 0
    text = capsys.readouterr().out
    states = text[text.index("Kernel-type states"):text.index("Queue length per stream")]
    for state in ("compute only", "communication only", "compute + communication", "idle"):
        line = next(line for line in states.splitlines() if f" {state} " in line)
        assert fmt_ns(ks.loc[state, "time_ns"]) in line, line
    queues = text[text.index("Queue length per stream"):].split("└", 1)[0]
    assert sum(1 for line in queues.splitlines() if "│ stream " in line) == len(ql) == 2
    out = tmp_path / "a.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    if browser.chromium() is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    dom, _ = browser.dump_dom(out)
    box = dom.split('id="states-table"', 1)[1].split("</section>", 1)[0]
    assert "communication only" in box and "compute + communication" in box
    box = dom.split('id="queues-table"', 1)[1].split("</section>", 1)[0]
    assert "stream 7" in box and "stream 40" in box


def test_last_cells_of_ascii_names_as_counted_cell_by_cell():
    """The ASCII shortcut of the end of a name that fits n cells gives what counting
    each character's cells gives (wide and control characters take the long way)."""
    from rich.cells import cell_len

    from polyprof.report.fit import _last_cells

    def by_cell(s: str, n: int) -> str:
        out, used = [], 0
        for ch in reversed(s):
            used += cell_len(ch)
            if used > n:
                break
            out.append(ch)
        return "".join(reversed(out))

    for s in ["", "a", "void gemm<float, 128>(float const*, int)", "tab\there", "核函数_kernel", "x\x00y"]:
        for n in range(-1, len(s) + 3):
            assert _last_cells(s, n) == by_cell(s, n), (s, n)


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_name_columns_stay_readable_on_a_narrow_page(traces_dir, tmp_path):
    """At 800 px the text columns took what the number columns left: the sections
    table's names were 28 px wide, one letter a line ("## backward ##" 206 px tall).
    They keep 16 characters; the table scrolls sideways instead."""
    import cdp

    out = tmp_path / "r.html"
    assert main(["report", str(traces_dir / "kineto" / "a100_nccl_rank0.json.gz"), "-o", str(out)]) == 0
    p = cdp.Page(browser.chromium(), width=800)
    try:
        p.open(out, "document.documentElement.getAttribute('data-rendered')")
        widths = p.eval("[...document.querySelectorAll('#sections-table td.txt, #kernels-table td.txt')]"
                        ".map(td => td.getBoundingClientRect().width)")
    finally:
        p.close()
    assert widths and min(widths) >= 100, widths


# Names shortened by what their parts mean (report/names.py), then cut where the rows
# differ (report/fit.py): the terminal tables at 80 and 100 columns on real traces.

DATA = Path(__file__).resolve().parents[1] / "data"
#: the traces whose tables read alike at 80 columns before: cuBLAS kernels that differ
#: mid-name (H200), NCCL and cuDNN signatures (A100), TensorFlow streams and Eigen kernels
NAMED_TRACES = {"jax_h200": DATA / "h200" / "jax_transformer_h200.xplane.pb.gz",
                "nccl_a100": DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz",
                "tf_gpu": DATA / "peers" / "tensorflow_profiler" / "gpu_multi_worker_34.83.195.179_6003.xplane.pb.gz",
                "cupti_a100": DATA / "traces" / "kineto" / "a100_cupti_counters.json.gz"}
#: table title: (analysis table, its name column, the header shown, a time column and its header)
NAMED_TABLES = {"Top device activity": ("kernel_breakdown", "name", "name", "total_ns", "total"),
                "Top framework ops (host)": ("op_stats", "name", "name", "total_ns", "total"),
                "Device time (analysed span)": ("temporal_breakdown", "stream", "stream", "span_ns", "span"),
                "Idle time by cause": ("idle_time_breakdown", "stream", "stream", "idle_ns", "idle"),
                "Launches": ("launch_summary", "launch_name", "launch call", "cpu_mean_ns", "CPU mean")}


@functools.lru_cache(maxsize=None)
def _named_report(key: str):
    from polyprof.report.tables import build

    return build(polyprof.load(NAMED_TRACES[key]))


def _render_at(report, width: int) -> list[str]:
    import io

    from rich.console import Console

    from polyprof.report.terminal import render

    buf = io.StringIO()
    render(report, console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue().splitlines()


def _grid(lines: list[str], title: str) -> tuple[list[str], list[list[str]]] | None:
    """The header cells and the rows' cells of the table titled ``title``, if shown."""
    start = next((i for i, line in enumerate(lines) if line == title or line.startswith(title + "  ")), None)
    if start is None:
        return None
    head = [c.strip() for c in lines[start + 2].strip("┃").split("┃")]
    rows = []
    for line in lines[start + 4:]:
        if not line.startswith("│"):
            break
        rows.append([c.strip() for c in line.strip("│").split("│")])
    return head, rows


def _in_order(shown: str, full: str) -> bool:
    """``shown`` is pieces of ``full`` (or of one of its shortened forms), in order."""
    from polyprof.report.names import ladder

    def pieces_of(text: str) -> bool:
        pos = 0
        for piece in (p for p in shown.split("…") if p):
            pos = text.find(piece, pos)
            if pos < 0:
                return False
            pos += len(piece)
        return True

    return any(pieces_of(form) for form in ladder(full))


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("key", ["jax_h200", "nccl_a100", "tf_gpu"])
def test_names_of_different_rows_never_read_alike(key, width):
    """`COLUMNS=80 polyprof summary` of the H200 JAX trace showed
    `sm90_xmma_gemm…f32_nt_n_tiles…` for two different kernels (488 ms and 55.5 ms), the
    A100 NCCL trace its top kernel as `…signed long, ncclWork*)`, the TensorFlow trace its
    streams as `Stre… #135…`. Every line fits, two rows read alike only where their names
    are equal, each cell is pieces of its name, and the times are whole."""
    from polyprof.analyze.frames import column
    from polyprof.report.terminal import fmt_ns

    report = _named_report(key)
    lines = _render_at(report, width)
    assert max(len(line) for line in lines) <= width
    checked = 0
    for title, (table, col, header, time_col, time_header) in NAMED_TABLES.items():
        grid = _grid(lines, title)
        if grid is None:
            continue
        head, rows = grid
        names = [str(v) for v in column(report.tables[table], col).tolist()][: len(rows)]
        times = column(report.tables[table], time_col).tolist()[: len(rows)]
        shown = [r[head.index(header)] for r in rows]
        for i, j in itertools.combinations(range(len(rows)), 2):
            assert shown[i] != shown[j] or names[i] == names[j], (title, shown[i], names[i], names[j])
        for s, full in zip(shown, names):
            assert _in_order(s, full), (title, s, full)
        assert [r[head.index(time_header)] for r in rows] == [fmt_ns(v) for v in times], title
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("width", [80, 100])
def test_nccl_kernel_keeps_its_collective_at_80_columns(width):
    """The A100's top kernel, `ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*,
    unsigned long, ncclWork*)`, read `…signed long, ncclWork*)`: its argument list goes
    first, so AllReduce stays; the kind column gives way to the name."""
    head, rows = _grid(_render_at(_named_report("nccl_a100"), width), "Top device activity")
    top = rows[0][head.index("name")]
    assert top.startswith("ncclKernel_AllReduce"), top
    assert "(" not in top and "ncclWork" not in top
    kind = rows[0][head.index("kind")]
    assert kind.startswith("commun"), kind


def test_streams_keep_their_number_at_80_columns():
    """TensorFlow's streams (`Stream #135(MemcpyH2D)`) read `Stre… #135…` and their
    device `/devi…PU:4`: what goes first is the part in parentheses and `/device:`."""
    lines = _render_at(_named_report("tf_gpu"), 80)
    head, rows = _grid(lines, "Idle time by cause")
    streams = {r[head.index("stream")] for r in rows}
    assert {"Stream #135", "Stream #142", "Stream #91"} <= streams, streams
    assert not any("…" in s for s in streams), streams
    assert {r[head.index("device")] for r in rows} == {"GPU:1", "GPU:4", "GPU:6"}


def test_events_table_gives_the_name_column_its_room_at_80_columns():
    """A Kineto trace's "Top events by total time" (category, name, count and four times)
    left names 17 cells: `aten::_con…lution`. The category gives way first, then min
    (max after it) leaves before a name gets under 24 cells."""
    lines = _render_at(_named_report("cupti_a100"), 80)
    assert max(len(line) for line in lines) <= 80
    head, rows = _grid(lines, "Top events by total time")
    assert "min" not in head and {"total", "mean"} <= set(head), head
    width = len(next(line for line in lines if line.startswith("┃") and "category" in line).split("┃")[2]) - 2
    assert width >= 24, width
    assert "aten::_convolution" in {r[head.index("name")] for r in rows}


def test_grid_lines_line_up_after_a_cell_is_replaced():
    """A cell replaced after the layout (`polyprof diff` puts its own cut of a name back)
    is measured again: every line of the table as wide as the others."""
    import pandas as pd

    from polyprof.report.grid import _table
    from polyprof.report.terminal import fmt_ns

    df = pd.DataFrame({"name": ["Memcpy DtoD (Device -> Device)", "void at::native::kernel<float>(float*)"],
                       "total_ns": [1e6, 2e3]})
    grid = _table("T", df, [("name", "name", None), ("total_ns", "total", fmt_ns)], 15, 30)
    assert grid.columns[0][1] > 8
    grid.rows[0][0] = "Memcpy…"
    lines = [text for text, _ in grid.lines(30)][1:]
    assert len({len(line) for line in lines}) == 1, lines


# report/names.py: ladder() on names from the traces above

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
       "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
THRESHOLD = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
             "at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::"
             "{lambda(float, float)#1}>, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, float, "
             "float, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, "
             "float)::{lambda(float, float)#1}>, at::detail::Array<char*, 3>)")
CLAMP = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
         "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::"
         "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
         "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
         "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
         "{lambda(float)#1}, at::detail::Array<char*, 2>)")
MAXPOOL = ("void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float>(float const*, long const*, "
           "int, long, long, long, int, int, int, int, int, int, int, int, int, int, float*)")
NCHW = ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>("
        "cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)")
CUTLASS = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_{}_align4>("
           "cutlass_80_tensorop_s1688gemm_256x64_16x4_{}_align4::Params)")
BN = ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, {}, true, 1>(float, float, float, float, "
      "cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, "
      "float*, float*, float const*, float const*, float)")
SM90 = "sm90_xmma_gemm_f32f32_tf32f32_f32_{}_n_tilesize{}_warpgroupsize{}_execute_segment_k_off_kernel__5x_cublas"
PHILOX = ("void tensorflow::functor::FillPhiloxRandomKernelLaunch<tensorflow::random::UniformDistribution<"
          "tensorflow::random::PhiloxRandom, Eigen::half> >(unsigned long long const*, unsigned long long const*, "
          "tensorflow::random::PhiloxRandom, tensorflow::random::UniformDistribution<tensorflow::random::PhiloxRandom, "
          "Eigen::half>::ResultElementType*, long long, tensorflow::random::UniformDistribution<"
          "tensorflow::random::PhiloxRandom, Eigen::half>)")


def test_ladder_drops_return_type_and_arguments_then_namespaces_then_templates():
    from polyprof.report.names import ladder

    assert ladder(NCCL) == (NCCL, "ncclKernel_AllReduce_RING_LL_Sum_float", "ncclKernel_AllReduce_RING_LL_Sum_float",
                            "ncclKernel_AllReduce_RING_LL_Sum_float")
    assert ladder("void ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")[-1] == \
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert ladder(ADD) == (ADD, "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                                "at::detail::Array<char*, 3> >",
                           "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, Array<char*, 3> >",
                           "vectorized_elementwise_kernel")
    assert ladder(CUTLASS.format("nn", "nn"))[1:] == (
        "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>",
        "Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>", "Kernel")
    assert ladder(PHILOX)[2:] == ("FillPhiloxRandomKernelLaunch<UniformDistribution<PhiloxRandom, half> >",
                                  "FillPhiloxRandomKernelLaunch")


def test_ladder_on_lambdas_anonymous_namespaces_operators_and_casts():
    from polyprof.report.names import ladder

    # a lambda in a template argument: its own argument lists emptied, namespaces gone
    steps = ladder(THRESHOLD)
    assert steps[2] == ("vectorized_elementwise_kernel<4, BinaryFunctor<float, float, float, "
                        "threshold_kernel_impl<float>()::{lambda()#1}>, Array<char*, 3> >")
    assert steps[3] == "vectorized_elementwise_kernel"
    # operator() const inside lambdas inside lambdas: the const stays a const
    steps = ladder(CLAMP)
    assert steps[2] == ("vectorized_elementwise_kernel<4, launch_clamp_scalar()::{lambda()#1}::operator()() const::"
                        "{lambda()#7}::operator()() const::{lambda()#1}, Array<char*, 2> >")
    assert steps[3] == "vectorized_elementwise_kernel"
    assert ladder("void foo<int>::operator()(int) const")[1:] == ("foo<int>::operator()", "foo<int>::operator()",
                                                                 "foo::operator()")
    # the function's own (anonymous namespace)
    assert ladder(MAXPOOL)[1:] == ("at::native::(anonymous namespace)::max_pool_backward_nchw<float, float>",
                                   "max_pool_backward_nchw<float, float>", "max_pool_backward_nchw")
    # a cast in a template argument is not an argument list
    assert ladder(NCHW)[2:] == ("nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>",
                                "nchwToNhwcKernel")
    # an operator whose < does not open template arguments
    assert ladder("bool operator<(Foo const&, Foo const&)")[-1] == "operator<"


def test_ladder_leaves_names_that_are_not_signatures_their_namespaces():
    from polyprof.report.names import ladder

    for name in (SM90.format("nt", "128x256x32", "2x1x1"), "fusion_381", "aten::_batch_norm_impl_index",
                 "command_buffer::update", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                 "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionE", "<UNKNOWN>",
                 "$array.py:293 __float__", "[0] PjRtStreamExecutorRawLoadedExecutable::Execute"):
        assert set(ladder(name)) == {name}, name
    # a note in parentheses goes; what is all in parentheses loses them; /device: goes
    assert ladder("Stream #135(MemcpyH2D)") == ("Stream #135(MemcpyH2D)", "Stream #135")
    assert ladder("Stream #14(Memset,Compute)")[-1] == "Stream #14"
    assert ladder("(all streams)")[-1] == "all streams"
    assert ladder("/device:GPU:4")[-1] == "GPU:4"
    assert ladder("cuGraphLaunch (CudaGraph:147)")[-1] == "cuGraphLaunch"
    assert ladder("Memcpy DtoD (Device -> Device)")[-1] == "Memcpy DtoD"
    assert ladder("CommonPjRtLoadedExecutable::Execute (jit_step)")[-1] == "CommonPjRtLoadedExecutable::Execute"
    assert ladder("PjitFunction(step)")[-1] == "PjitFunction"


def test_fit_names_steps_back_where_names_would_read_alike():
    from rich.cells import cell_len

    from polyprof.report.names import fit_names

    # three cutlass kernels: "Kernel" for each would read alike; their template argument stays
    kernels = [CUTLASS.format(v, v) for v in ("nn", "nt", "tn")] + [BN.format(n) for n in (128, 32, 512)]
    for width in (20, 30, 45):
        out = fit_names(kernels, width)
        assert all(cell_len(o) <= width for o in out) and len(set(out)) == len(kernels), (width, out)
        assert [v in o for v, o in zip(("nn", "nt", "tn"), out)] == [True] * 3, out
        assert [n in o for n, o in zip(("128", "32", "512"), out[3:])] == [True] * 3, out
    # one of a kind: its base name, whole
    assert fit_names([ADD, NCCL, "fusion_381"], 30) == ["vectorized_elementwise_kernel",
                                                         "ncclKernel_AllReduce_RING_LL_…", "fusion_381"]
    # two of a kind: apart where their template arguments differ
    out = fit_names([ADD, THRESHOLD, CLAMP], 30)
    assert len(set(out)) == 3 and all(o.startswith("vectorized_ele") for o in out), out
    assert "CUDAFunctor_ad" in out[0] and "BinaryFunctor" in out[1] and "launch_clamp" in out[2], out
    # cuBLAS kernels that differ in the middle (the H200 trace: nt/tn/nn and the tile sizes)
    sm90 = [SM90.format(*v) for v in (("nt", "128x256x32", "2x1x1"), ("tn", "128x128x32", "1x1x1"),
                                      ("nn", "128x128x32", "1x1x1"), ("nn", "64x256x32", "1x1x1"),
                                      ("tn", "256x128x32", "2x1x1"), ("nt", "128x128x32", "1x1x1"))]
    for width in (12, 20, 30, 40):
        out = fit_names(sm90, width)
        assert all(len(o) <= width for o in out) and len(set(out)) == len(sm90), (width, out)
    assert fit_names(sm90, 30)[0] == "sm90…nt_n_tilesize128x256x32…"  # their words, whole
    # names that fit stay whole
    assert fit_names(["aten::mm", "Stream #7"], 20) == ["aten::mm", "Stream #7"]


#: the nine implicit-GEMM convolution kernels of a TensorRT engine (ResNet, Nsight Systems
#: export), as the "Top device activity" table of its summary lists them
TRT = ["sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize{}_execute_kernel_trt".format(v) for v in (
    "128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_t1r3s3_aACCESS",
    "128x64x64_stage3_warpsize2x2x1_g1_tensor16x8x16_t1r3s3_aACCESS")] + [
    "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize128x32x64_stage1_warpsize4x1x1"
    "_g1_tensor16x8x16_aligna8_alignc8_execute_kernel_trt"] + [
    "sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize{}_execute_kernel_trt".format(v) for v in (
        "256x64x32_stage3_warpsize4x1x1_g1_tensor16x8x16_t1r3s3",
        "256x64x32_stage3_warpsize4x1x1_g1_tensor16x8x16_t1r3s3_aACCESS",
        "256x128x32_stage3_warpsize4x2x1_g1_tensor16x8x16_t1r3s3",
        "128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16",
        "128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_t1r1s1")] + [
    "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize64x128x32_stage5_warpsize2x2x1_g1"
    "_tensor16x8x16_execute_kernel_trt"]


def _whole_words(shown: str, name: str) -> bool:
    """Each piece of ``shown`` (between its "…") is whole words of ``name``, in order."""
    pos = 0
    for piece in (p for p in shown.split("…") if p):
        pos = name.find(piece, pos)
        while pos > 0 and name[pos - 1] != "_" or 0 <= pos and pos + len(piece) < len(name) and \
                name[pos + len(piece)] != "_":
            pos = name.find(piece, pos + 1)
        if pos < 0:
            return False
        pos += len(piece)
    return True


def test_fit_names_shows_generated_kernels_by_the_words_that_tell_them_apart():
    """`COLUMNS=80 polyprof summary` of a TensorRT engine's Nsight Systems export showed
    its nine implicit-GEMM kernels as `sm80_xmma_…f…1…1…1…t…3…_aACCE…`: a window of one
    character onto each place where two differ. They differ in whole words (tile size,
    stage, t1r3s3, aACCESS): each row shows the words that tell it from the others."""
    from polyprof.report.names import fit_names

    assert fit_names(TRT, 30) == [
        "…tilesize128x128x32…t1r3s3…", "sm80…tilesize128x64x64_stage3…", "sm80…indexed_wo_smem…stage1…",
        "sm80…tilesize256x64x32_stage3…", "…tilesize256x64x32…aACCESS…", "sm80…tilesize256x128x32…",
        "sm80…tilesize128x128x32…", "sm80…stage4…t1r1s1…", "sm80…tilesize64x128x32_stage5…"]
    for width in range(27, 100, 3):  # (narrower, "…tilesize128x128x32…t1r3s3…" does not fit)
        out = fit_names(TRT, width)
        assert all(len(o) <= width for o in out) and len(set(out)) == len(TRT), (width, out)
        assert all(_whole_words(o, n) for o, n in zip(out, TRT)), (width, out)
        if width >= 40:  # every one its tile size, whole
            assert all(n[n.index("tilesize"):].split("_")[0] in o for o, n in zip(out, TRT)), (width, out)
    # among other kernels of the table, and with the cells a summary gives them
    table = TRT + ["sm50_xmma_pooling_coalescedC_NHWC_kMAX_3_False_execute_kernel_trt", NCHW, ADD]
    for width in (30, 40, 60):
        assert fit_names(table, width)[:9] == fit_names(TRT, width), width


@pytest.mark.parametrize("width", [80, 100])
def test_cublas_kernels_keep_their_layout_and_tile_size_whole(width):
    """The H200 JAX trace's six cuBLAS kernels at 100 columns read
    `sm90_xmma_gemm_f32f…ze128x256x32_warpgr…`: the layout (nt) gone, the tile size cut.
    Each now shows both, whole, as at 80 columns. (Each is a row of its XLA module, and
    every row shown is of ``jit_step``: the title says the module once, the names go
    without it.)"""
    lines = _render_at(_named_report("jax_h200"), width)
    head, rows = _grid(lines, "Top device activity")
    assert any("Top device activity" in x and "module: jit_step" in x for x in lines)
    shown = [r[head.index("name")] for r in rows if r[head.index("name")].startswith("sm90")]
    assert len(shown) == 6, shown
    assert sorted(s.split("…")[1] for s in shown) == sorted(
        f"{a}_n_tilesize{t}" for a, t in (("nt", "128x256x32"), ("tn", "128x128x32"), ("nn", "128x128x32"),
                                          ("nn", "64x256x32"), ("tn", "256x128x32"), ("nt", "128x128x32"))), shown


@pytest.mark.parametrize("key", ["nccl_a100", "tf_gpu", "jax_h200"])
def test_fit_names_keeps_every_table_of_names_apart_at_any_width(key):
    """Every name column of the real traces (their first 15 rows), 8 to 60 cells wide:
    as wide as the column at most, and different names never shortened alike."""
    from polyprof.analyze.frames import column
    from polyprof.report.names import fit_names

    report = _named_report(key)
    for table, col in (("kernel_breakdown", "name"), ("op_stats", "name"), ("event_stats", "name"),
                       ("temporal_breakdown", "stream"), ("launch_summary", "launch_name")):
        names = [str(v) for v in column(report.tables[table], col).tolist()][:15]
        for width in range(8, 61, 4):
            out = fit_names(names, width)
            assert all(len(o) <= width for o in out), (table, width, out)
            for i, j in itertools.combinations(range(len(names)), 2):
                assert out[i] != out[j] or names[i] == names[j], (table, width, out[i], names[i], names[j])
