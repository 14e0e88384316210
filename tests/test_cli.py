"""The polyprof command: run (exit codes, signals), summary, export, plugins, demo."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path | None = None, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, **kw)


@pytest.fixture(scope="module")
def pipeline_trace(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("run") / "out.polyprof"
    r = cli("run", "-o", str(out), "--plugins", "host", str(ROOT / "examples" / "threaded_pipeline.py"),
            "--steps", "5")
    return out, r


def test_run_two_threads(pipeline_trace):
    out, r = pipeline_trace
    assert r.returncode == 0, r.stderr
    assert "final loss" in r.stdout  # the script's own output
    assert "Sections" in r.stdout and "train step" in r.stdout  # the summary
    assert str(out) in r.stderr
    tr = polyprof.load(out)
    names = tr.names()
    assert (names == "train step").sum() == 5 and (names == "load batch").sum() == 5
    threads = {tr.tracks[t].name for t in tr.events["track"][np.isin(names, ["train step", "load batch"])]}
    assert threads == {"MainThread", "loader"}


def test_summary_lists_sections_with_stats(pipeline_trace):
    out, _ = pipeline_trace
    r = cli("summary", str(out), "--all-steps")
    assert r.returncode == 0, r.stderr
    assert "analysed window: all 5 steps" in r.stdout
    line = next(l for l in r.stdout.splitlines() if "forward" in l)
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells[0] == "forward" and cells[1] == "5"  # name, count
    assert all(any(u in c for u in ("s", "ms", "µs", "ns")) for c in cells[2:6])  # total/mean/min/max
    for col in ("count", "total", "mean", "min", "max"):
        assert col in r.stdout


def _header_of(stdout: str, title: str) -> list[str]:
    """The column names of the table ``title`` in a summary's text."""
    lines = stdout.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith(title))
    return [c.strip() for c in lines[at + 2].strip("┃ ").split("┃")]


def test_op_table_shows_device_columns_only_with_a_device(tmp_path):
    """A trace with no device activity (a CPU-only torch rank: its ops in its one step)
    gives the op names the width the "device caused" and "launches" columns (always 0
    there) would take."""
    kineto = ROOT / "tests" / "data" / "traces" / "kineto"
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          *({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
            for i in range(1, 5))]
    (tmp_path / "cpu.json").write_text(json.dumps({"traceEvents": ev}))
    cpu = cli("summary", str(tmp_path / "cpu.json"))
    gpu = cli("summary", str(kineto / "a100_alexnet_small.json.gz"))
    assert cpu.returncode == 0 and gpu.returncode == 0, cpu.stderr + gpu.stderr
    assert _header_of(cpu.stdout, "Top framework ops") == ["name", "count", "total", "self"]
    assert _header_of(gpu.stdout, "Top framework ops")[-2:] == ["device caused", "launches"]


def test_summary_window_default_skips_the_warm_up_step_and_says_so(pipeline_trace):
    """The 5-step run: by default the first step (warm-up) is left out of every table,
    the window is printed at the top; --steps and --skip-first choose other steps."""
    out, _ = pipeline_trace
    def forward_count(*opts: str) -> tuple[str, str]:
        r = cli("summary", str(out), *opts)
        assert r.returncode == 0, r.stderr
        line = next(l for l in r.stdout.splitlines() if "forward" in l)
        window = next(l for l in r.stdout.splitlines() if l.startswith("analysed window"))
        return [c.strip() for c in line.strip("│ ").split("│")][1], window
    tr = polyprof.load(out)
    from polyprof.derive.cache import steps
    nums = steps(tr).number.tolist()
    assert len(nums) == 5
    count, window = forward_count()
    assert count == "4" and "first step skipped" in window and f"{nums[1]}-{nums[4]}" in window
    count, window = forward_count("--steps", f"{nums[1]}:{nums[3]}")
    assert count == "2" and f"steps {nums[1]}-{nums[2]} of" in window
    count, _ = forward_count("--skip-first", "3")
    assert count == "2"
    r = cli("summary", str(out), "--steps", "999:")
    assert r.returncode != 0 and "selects none" in r.stderr and "Traceback" not in r.stderr
    r = cli("summary", str(out), "--steps", "a:b")
    assert r.returncode != 0 and "--steps" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_export_chrome_names_threads_nesting(pipeline_trace, tmp_path):
    out, _ = pipeline_trace
    dst = tmp_path / "out.json.gz"
    r = cli("export", str(out), "-f", "chrome", "-o", str(dst))
    assert r.returncode == 0, r.stderr
    doc = json.loads(gzip.decompress(dst.read_bytes()))
    evs = doc["traceEvents"]
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs
                    if e["ph"] == "M" and e["name"] == "thread_name"}
    proc_names = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert "/host:CPU" in proc_names.values()
    xs = [e for e in evs if e["ph"] == "X"]
    by_name: dict[str, list] = {}
    for e in xs:
        by_name.setdefault(e["name"], []).append(e)
    assert {thread_names[(e["pid"], e["tid"])] for e in by_name["train step"]} == {"MainThread"}
    assert {thread_names[(e["pid"], e["tid"])] for e in by_name["read"]} == {"loader"}
    for child in by_name["forward"]:  # every forward nests in a train step on the same thread
        assert any(p["tid"] == child["tid"] and p["ts"] <= child["ts"]
                   and child["ts"] + child["dur"] <= p["ts"] + p["dur"] + 1e-3 for p in by_name["train step"])
    assert any(e["ph"] == "C" for e in evs)


SCRIPT = """
import os, signal, sys, time
import polyprof
with polyprof.section("done before"):
    time.sleep(0.01)
mode = sys.argv[1]
with polyprof.section("interrupted"):
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "exit":
        sys.exit(3)
    if mode in ("int", "term"):
        print("ready", flush=True)
        time.sleep(30)
"""


# killed by a signal: the status plain python has (tests/test_safety_run.py compares them)
@pytest.mark.parametrize("mode, code", [("raise", 1), ("exit", 3), ("int", -signal.SIGINT),
                                        ("term", -signal.SIGTERM)])
def test_run_keeps_trace_and_exit_code(tmp_path, mode, code):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    out = tmp_path / "s.polyprof"
    cmd = [sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(script), mode]
    if mode in ("int", "term"):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGINT if mode == "int" else signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        rc = p.returncode
    else:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        rc, err = r.returncode, r.stderr
    assert rc == code, err
    if mode == "raise":
        assert "RuntimeError: boom" in err
    tr = polyprof.load(out)
    names = list(tr.names())
    assert names.count("done before") == 1
    assert names.count("interrupted") == 1  # unwound through the with block
    i = names.index("done before")
    assert tr.dur_ns[i] >= 10_000_000


def test_run_missing_script_is_a_clear_error(tmp_path):
    r = cli("run", str(tmp_path / "nope.py"))
    assert r.returncode == 2 and "no such script" in r.stderr


def test_plugins_lists_host(tmp_path):
    r = cli("plugins")
    assert r.returncode == 0 and "host" in r.stdout and "yes" in r.stdout


def test_summary_of_bad_file_names_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    r = cli("summary", str(bad))
    assert r.returncode == 1 and "bad.json" in r.stderr and "Traceback" not in r.stderr


def test_summary_ends_without_teardown_but_with_its_output_and_exit_handlers(pipeline_trace, tmp_path):
    """The command skips the interpreter's teardown after a summary (cli.entry): what it
    printed to a pipe (block-buffered) is all there, the exit handlers ran, and the exit
    code is main()'s, for success and for an error."""
    code = ("import atexit, sys\natexit.register(lambda: print('handlers ran', file=sys.stderr))\n"
            "sys.argv = ['polyprof'] + sys.argv[1:]\nfrom polyprof.cli import entry\nentry()\n"
            "print('not reached', file=sys.stderr)\n")
    ok = subprocess.run([sys.executable, "-c", code, "summary", str(pipeline_trace[0]), "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout)["tables"]
    assert "handlers ran" in ok.stderr and "not reached" not in ok.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    err = subprocess.run([sys.executable, "-c", code, "summary", str(bad)], capture_output=True, text=True,
                         timeout=120)
    assert err.returncode == 1 and "bad.json" in err.stderr and "handlers ran" in err.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["terminal", "json"])
def test_summary_to_a_full_disk_fails_in_one_line(pipeline_trace, fmt):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(pipeline_trace[0]), *fmt],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 1 and "No space left on device" in r.stderr and "Traceback" not in r.stderr


def test_help_reads_well():
    r = cli("--help")
    assert r.returncode == 0
    for cmd in ("run", "summary", "export", "plugins", "demo"):
        assert cmd in r.stdout


def test_a_command_builds_its_own_parser_only():
    """`polyprof run ...` builds the parser of `run` alone (every command's module and
    parser cost each run 6-13 ms); with no command, or an unknown one, all of them."""
    from polyprof.cli import COMMANDS, build_parser, command_of

    assert command_of(["-v", "run", "-o", "x.polyprof", "summary.py"]) == "run"
    assert command_of(["-vv", "summary", "t.json"]) == "summary"
    assert command_of(["--help"]) is None and command_of(["nosuch", "run"]) is None
    sub = next(a for a in build_parser("run")._actions if a.dest == "command")
    assert list(sub.choices) == ["run"]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == COMMANDS
    r = cli("nosuch")
    assert r.returncode == 2 and "invalid choice" in r.stderr and "summary" in r.stderr


def test_demo_threads(tmp_path):
    r = cli("demo", "-w", "threads", "--plugins", "host", "-o", str(tmp_path / "d.polyprof"), cwd=tmp_path,
            timeout=300)
    assert r.returncode == 0, r.stderr
    assert "train step" in r.stdout and (tmp_path / "d.polyprof").exists()


@pytest.mark.opencl
def test_demo_default_profiles_the_opencl_pipeline(tmp_path):
    pytest.importorskip("polyprof.demo.opencl_pipeline", reason="pyopencl or an OpenCL device missing")
    r = cli("demo", "-o", str(tmp_path / "d.polyprof"), cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "opencl workload" in r.stderr
    for kernel in ("blur_h", "blur_v", "sobel", "reduce_sum"):  # device time per kernel
        assert kernel in r.stdout
    tr = polyprof.load(tmp_path / "d.polyprof")
    assert any(p.startswith("/device:OpenCL") for p in (pl.name for pl in tr.planes))


def test_demo_falls_back_when_opencl_cannot_run(tmp_path):
    # pyopencl made unimportable, as on a machine without it
    code = ("import sys; sys.modules['pyopencl'] = None; from polyprof.cli import main; "
            f"sys.exit(main(['demo', '-o', {str(tmp_path / 'd.polyprof')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "threads workload" in r.stderr and "train step" in r.stdout
    r = subprocess.run([sys.executable, "-c", code.replace("'demo',", "'demo', '-w', 'opencl',")],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 1 and "no demo workload can run here" in r.stderr and "opencl" in r.stderr
    assert "Traceback" not in r.stderr


def test_version_is_one_string_everywhere(tmp_path):
    """polyprof.__version__, `polyprof --version` and the version a trace records agree."""
    import re

    v = polyprof.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+([a-z]+\d+)?(\.dev\d+)?", v), v
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"polyprof {v}"
    with polyprof.profile(["host"], output=tmp_path / "v.polyprof"):
        polyprof.step()
    assert polyprof.load(tmp_path / "v.polyprof").metadata["polyprof_version"] == v


NCCL = ROOT / "tests" / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
OTHER = ROOT / "tests" / "data" / "traces" / "kineto" / "sampled_rank0.json.gz"


@pytest.mark.parametrize("args, says", [
    (["summary", str(NCCL), "-n", "-1"], "argument -n/--top: -1: expected a whole number, 0 or more"),
    (["summary", str(NCCL), "--skip-first", "x"], "argument --skip-first: 'x': expected a whole number"),
    (["summary", str(NCCL), "-j", "0"], "argument -j/--jobs: 0: expected a whole number, 1 or more"),
    (["sql", str(NCCL), "SELECT 1", "--max-rows", "-1"], "argument --max-rows: -1: expected"),
    (["sql", str(NCCL), "SELECT 1", "--timeout", "-1"], "argument --timeout: -1: expected a number, 0 or more"),
    (["sql", str(NCCL), "SELECT 1", "--memory-limit", "abc"], "'abc': expected a size such as 4GB or 512MiB"),
    (["convert", str(NCCL), "-o", "s", "--chunk-rows", "-5"], "argument --chunk-rows: -5: expected"),
    (["diff", str(NCCL), str(OTHER), "--min-change-pct", "-5"], "argument --min-change-pct: -5: expected"),
    (["capture", "127.0.0.1:1", "--grace", "-1"], "argument --grace: -1: expected a number, 0 or more"),
    (["summary", str(NCCL), "--all-steps", "--skip-first", "2"], "--all-steps is --skip-first 0: give one of them"),
    (["summary", str(NCCL), "--steps="], "--steps '': expected A:B, A:, :B or N"),
    # (read as step 5 alone before: the second number taken for a negative one and dropped)
    (["summary", str(NCCL), "--steps=5-8"], "--steps '5-8': expected A:B, A:, :B or N (step numbers); steps 5 "
                                            "to 8 are 5:9"),
    (["diff", str(NCCL), str(OTHER), "--steps", "5 8"], "--steps '5 8': expected A:B"),
    (["report", str(NCCL), "--rank", "3", "-o", "r.html"], "--rank 3: "),
    (["export", str(NCCL), "--rank", "3", "-o", "r.json"], "--rank 3: "),
    (["capture", "127.0.0.1:1", "-o", "x", "--logdir", "d"], "-o and --logdir both name where to write"),
    (["critical-path", str(NCCL), "--what-if", "0:nccl:-1"], "FACTOR 0 or more"),
])
def test_a_value_out_of_range_or_a_clash_is_one_line(tmp_path, args, says):
    """Values out of range were taken (-n -1 crashed the summary, -j 0 hung nothing but
    made no sense, --memory-limit abc an internal error) and some clashes went unsaid
    (--rank on one file, --all-steps with --skip-first)."""
    r = cli(*args, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode in (1, 2) and says in lines[-1] and "Traceback" not in r.stderr, r.stderr
    assert not [p for p in tmp_path.iterdir()]  # nothing written


def test_span_or_rounding_alone_keeps_the_default_steps():
    """--span device (or --round-us) alone turned the warm-up skip off: steps 4-6 where
    the default analyses 5-6 of the A100 trace."""
    for extra in ([], ["--span", "device"], ["--round-us"]):
        doc = json.loads(cli("summary", str(NCCL), "--json", *extra).stdout)
        assert doc["overview"]["window"].startswith("steps 5-6 of 4-6"), (extra, doc["overview"]["window"])


def test_run_serve_refuses_the_options_it_cannot_apply_and_a_missing_module(tmp_path):
    (tmp_path / "ok.py").write_text("pass\n")
    r = cli("run", "--serve", "127.0.0.1:0", "--max-events", "5", "-o", "x.polyprof", "ok.py", cwd=tmp_path)
    assert r.returncode == 1 and "--max-events, --output apply to a run without it" in r.stderr
    r = cli("run", "-m", "no_such_module_here", cwd=tmp_path)
    assert r.returncode == 2 and "no such module" in r.stderr
    assert not list(tmp_path.glob("*.polyprof"))


def test_diff_html_to_a_directory_is_refused_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = cli("diff", str(NCCL), str(OTHER), "-o", str(out))
    assert r.returncode == 1 and f"{out} is a directory" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not list(out.iterdir())


def test_critical_path_command_names_the_step_numbers():
    """Its steps are positions (--step K); the lines said "step 0" for the trace's step 4,
    which every other command calls step 4."""
    r = cli("critical-path", str(NCCL), "--step", "1")
    assert r.returncode == 0 and r.stdout.startswith("step 1 (#5): critical path "), r.stdout[:200]


def test_sql_of_more_columns_than_a_table_shows_prints_records():
    """``SELECT *`` at 80 columns: a table of ~30 columns folded every cell to nothing (the
    eighth sweep); such a result prints as records, every value there and every line
    within the terminal, while a narrow result stays a table."""
    import os

    env = dict(os.environ, COLUMNS="80")
    r = cli("sql", str(NCCL), "SELECT * FROM events WHERE category = 'kernel' ORDER BY start_ns LIMIT 2", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "2 row(s)" and lines[1].startswith("-[ row 1 ]") and sum(ln.startswith("-[ row ") for ln in lines) == 2
    assert max(map(len, lines)) <= 80
    fields = {ln.split(" | ", 1)[0].strip(): ln.split(" | ", 1)[1] for ln in lines if " | " in ln and ln[0] != " "}
    assert fields["plane"] == "/device:GPU:0" and fields["category"] == "kernel" and int(fields["dur_ns"]) > 0
    narrow = cli("sql", str(NCCL), "SELECT category, count(*) AS n FROM events GROUP BY 1 ORDER BY 1", env=env)
    assert narrow.returncode == 0 and "┃ category" in narrow.stdout and "kernel" in narrow.stdout


def test_sql_result_columns_of_one_name_keep_their_values():
    """Result columns may share a name (the store example's ``s.name, d.name``): the
    table printed each row's values by name, so ``SELECT 1 AS a, 2 AS a, 3 AS b`` showed
    2, 3 and an empty b (an auditor); and an empty result's "0 row(s)" wrapped in three
    lines at its narrow table's width."""
    r = cli("sql", str(NCCL), "SELECT 1 AS a, 2 AS a, 3 AS b")
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("│")] == ["│ 1 │ 2 │ 3 │"], r.stdout
    wide = cli("sql", str(NCCL), "SELECT 1 AS a, 2 AS a, " + ", ".join(f"3 AS {c * 12}" for c in "bcdefgh"),
               env={**__import__("os").environ, "COLUMNS": "80"})  # (records: more columns than fit)
    fields = [[f.strip() for f in ln.split(" | ")] for ln in wide.stdout.splitlines() if " | " in ln]
    assert fields[:3] == [["a", "1"], ["a", "2"], ["b" * 12, "3"]], wide.stdout
    empty = cli("sql", str(NCCL), "SELECT 1 AS a WHERE false")
    assert empty.stdout.splitlines()[0] == "0 row(s)", empty.stdout


def test_sql_results_with_lists_and_structs_print_as_json():
    """A list or struct column (``list(name)``, ``array_agg``) raised "internal error
    (ArrowInvalid: Unsupported Type:list<l: int32>)" under --csv, and a table showed
    Python reprs (``[Decimal('1.5')]``): both print it as JSON text (an auditor)."""
    q = "SELECT [1, 2] AS l, {'a': 1.5::DECIMAL(4,1)} AS s, list(name ORDER BY name)[1:1] AS n FROM events"
    r = cli("sql", "--csv", str(NCCL), q)
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header == '"l","s","n"' and row.startswith('"[1, 2]","{""a"": ""1.5""}","[""'), row
    t = cli("sql", str(NCCL), "SELECT [1.5::DECIMAL(4,1)] AS d")
    assert t.returncode == 0 and '["1.5"]' in t.stdout and "Decimal" not in t.stdout, t.stdout


def test_a_narrow_counters_table_keeps_the_peak(pipeline_trace):
    """Where the counters table cannot show every column, the peak (``max``: the peak
    RSS) is the last of min / max / mean to go: at 80 columns a program's table had
    dropped max and kept min."""
    from polyprof.report import terminal
    from polyprof.report.tables import build

    out, _ = pipeline_trace
    counters = build(polyprof.load(out)).tables["counter_stats"]
    shown = []
    for width in range(30, 200):
        grids: list = []
        terminal._counter_table(grids.append, counters, 15, width)
        shown.append(tuple(h for h in grids[0].headers if h in ("min", "max", "mean")))
    assert set(shown) == {(), ("max",), ("min", "max"), ("min", "max", "mean")}, set(shown)


def test_a_directory_of_one_trace_reads_as_that_trace(tmp_path):
    """A ``tensorboard_trace_handler`` log directory of one run, or a ``jax.profiler`` log
    directory of one process (its XSpace and JAX's JSON copy of it), given for the trace:
    summarised as the trace, not as a job of one rank (which showed only the ranks' and
    clock tables)."""
    import shutil

    tb = tmp_path / "tb"
    tb.mkdir()
    shutil.copy(NCCL, tb / "w0.123.pt.trace.json.gz")
    xspace = ROOT / "tests" / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
    run = tmp_path / "jax" / "plugins" / "profile" / "2026_11_29_14_29_47"
    run.mkdir(parents=True)
    shutil.copy(xspace, run / "host.xplane.pb")
    (run / "host.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    for d, f in ((tb, NCCL), (tmp_path / "jax", xspace)):
        of_dir, of_file = cli("summary", str(d)), cli("summary", str(f))
        assert of_dir.returncode == 0 and of_file.returncode == 0, of_dir.stderr + of_file.stderr
        assert of_dir.stdout == of_file.stdout and "Ranks side by side" not in of_dir.stdout
    shutil.copy(NCCL, tb / "w1.456.pt.trace.json.gz")  # two traces: the ranks of a job, as before
    assert "Ranks side by side" in cli("summary", str(tb)).stdout


def test_a_rank_asked_of_a_directory_of_one_trace(tmp_path):
    """``--rank N`` over per-rank directories (a script's loop) worked before a directory
    of one trace read as that trace: with ``--rank`` it is still a job of one rank."""
    import shutil

    d = tmp_path / "r1"
    d.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "traces" / "kineto" / "sampled_rank1.json.gz", d)
    exported = cli("export", str(d), "--rank", "1", "-f", "perfetto", "-o", str(tmp_path / "x.pftrace"))
    assert exported.returncode == 0, exported.stderr
    assert polyprof.load(tmp_path / "x.pftrace").n_events > 0
    report = cli("report", str(d), "--rank", "1", "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0 and (tmp_path / "r.html").stat().st_size > 0, report.stderr
    wrong = cli("export", str(d), "--rank", "3", "-f", "perfetto", "-o", str(tmp_path / "y.pftrace"))
    assert wrong.returncode == 1 and "rank" in wrong.stderr and not (tmp_path / "y.pftrace").exists()


def test_files_left_out_of_a_directory_are_said_once(tmp_path):
    """Two ranks and a summary written beside them: one warning names the summary (the
    one-trace check lists the directory too, silently)."""
    import shutil

    for name in ("sampled_rank0.json.gz", "sampled_rank1.json.gz"):
        shutil.copy(ROOT / "tests" / "data" / "traces" / "kineto" / name, tmp_path)
    (tmp_path / "summary.json").write_text('{"tables": {}}')
    r = cli("summary", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("left out, not traces") == 1 and "summary.json" in r.stderr, r.stderr


def test_run_calls_the_programs_excepthook(tmp_path):
    """A program that set its own ``sys.excepthook`` (torch.distributed's init_process_group
    puts ``[rank0]:`` before every line of a rank's traceback; rich.traceback.install()
    draws one) has its uncaught exception told by it under ``polyprof run``, as under
    python; a hook that fails is said, then the exception, in python's words."""
    script = tmp_path / "hook.py"
    for body, first in (("    print(f'[custom hook] {t.__name__}: {v} at line {tb.tb_lineno}', file=sys.stderr)\n",
                         "[custom hook] ValueError: boom at line 5"),
                        ("    raise RuntimeError('hook failed')\n", "Error in sys.excepthook:")):
        script.write_text("import sys\ndef hook(t, v, tb):\n" + body + "sys.excepthook = hook\nraise ValueError('boom')\n")
        plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        run = cli("run", "--no-summary", "-o", str(tmp_path / "h.polyprof"), str(script), cwd=tmp_path)
        assert plain.returncode == run.returncode == 1, run.stderr
        assert plain.stderr.splitlines()[0] == run.stderr.splitlines()[0] == first, run.stderr
        assert ("Original exception was:" in plain.stderr) == ("Original exception was:" in run.stderr)
        assert "ValueError: boom" in run.stderr


def test_the_steps_table_says_which_window_each_column_is():
    """A step's busy, compute and idle are device time within its host span, its launches
    the calls made in it (an audit read the two as one window); the table says so."""
    r = cli("summary", str(ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"))
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "busy, compute, idle = device time within the step's host span; launches = the step's launch calls" \
        in text


def test_the_help_examples_parse():
    """Every ``polyprof ...`` example of ``polyprof --help`` is a command line the parser
    takes: ``polyprof export FILE -f chrome`` was refused ("the following arguments are
    required: -o/--output", an auditor)."""
    import re
    import shlex

    from polyprof.cli import DESCRIPTION, build_parser

    examples = [shlex.split(m)[1:] for m in re.findall(r"^  (polyprof [^\n]*?)(?:   |$)", DESCRIPTION, re.M)]
    assert len(examples) >= 8, examples
    for argv in examples:
        assert build_parser(only=argv[0]).parse_args(argv).command == argv[0], argv


def test_verbose_after_the_command():
    """``polyprof summary -v FILE`` was refused ("unrecognized arguments: -v", an auditor):
    -v goes before or after the command; ``run``'s arguments after the script stay the
    script's."""
    from polyprof.cli import build_parser

    assert build_parser(only="summary").parse_args(["summary", "-v", "f"]).verbose == 1
    assert build_parser(only="summary").parse_args(["-v", "summary", "f"]).verbose == 1
    assert build_parser(only="summary").parse_args(["summary", "f"]).verbose == 0
    run = build_parser(only="run").parse_args(["run", "s.py", "-v"])
    assert run.verbose == 0 and "-v" in " ".join(map(str, vars(run).values())), vars(run)


def test_out_of_memory_names_the_files_and_a_limit_too_low_to_start_is_one_line(tmp_path):
    """A MemoryError said "polyprof: error: out of memory", no file named; under a limit
    below NumPy's own mappings the summary printed a traceback from its import."""
    import subprocess

    from limits import polyprof_limited
    from polyprof.cli.common import error_line

    assert error_line(MemoryError(), ["a.json", "b.json"]).startswith(
        "polyprof: error: a.json, b.json: out of memory (the process's memory limit")
    r = subprocess.run(polyprof_limited("summary", str(NCCL), address_space=60 << 20), capture_output=True,
                       text=True, timeout=120)
    # one line: polyprof's, or where a native library ends the process itself first (OpenBLAS's
    # "Memory allocation still failed", in a venv whose NumPy maps its buffers at import) its own
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert lines[0].startswith(("polyprof: error: out of memory starting `polyprof summary`", "OpenBLAS error")), \
        r.stderr


def test_a_what_if_name_that_matches_nothing_is_warned(capsys, caplog):
    """``--what-if 3:all_gather:0.8`` on a job whose collectives are gloo's all_reduce and
    broadcast: "x0.8 (0 events): step 0 ns" for every step, exit 0, no word of the typo."""
    from polyprof.cli import main

    job = ROOT / "tests" / "data" / "traces" / "gloo_world_late"
    with caplog.at_level("WARNING", logger="polyprof"):
        assert main(["critical-path", str(job), "--what-if", "3:all_gather:0.8", "--json"]) == 0
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("--what-if 3:all_gather:0.8: no event of rank 3 in the analysed steps has a name "
                            "holding 'all_gather'") for m in said), said
    caplog.clear()
    with caplog.at_level("WARNING", logger="polyprof"):
        assert main(["critical-path", str(job), "--what-if", "3:broadcast:0.8", "--json"]) == 0
    assert not any("--what-if" in r.getMessage() for r in caplog.records)


def test_sql_prints_at_most_a_bounded_table(tmp_path, capsys):
    """``--max-rows 10000000`` of a 5.4M-row result built every row as Python objects and
    a rich cell before printing (9 GB, killed at 300 s); a table now holds at most
    TABLE_ROWS rows and says to use --csv for the rest."""
    from polyprof.cli import main
    from polyprof.cli.sql import TABLE_ROWS

    q = f"SELECT * FROM range({TABLE_ROWS + 5}) t(i)"
    assert main(["sql", str(NCCL), q, "--max-rows", str(10 * TABLE_ROWS)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{TABLE_ROWS + 5} row(s)") and "... 5 more row(s); use --csv: a table holds at most" in err
