"""An output path that names what the command reads is refused before anything is read
or run (cli/common.refuse_over_inputs): `run`'s script, `report`'s, `export`'s and
`diff`'s traces, by any spelling (another path, a symbolic or a hard link). Real
subprocesses, bounded. Also: where `demo` and `run` say their trace went."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyprof.cli.common import OutputOverInputError, refuse_over_inputs
from polyprof.errors import OutputError, PolyprofError

TIMEOUT = 300
#: a Chrome JSON trace: two steps, two kernels each
EVENTS = [{"ph": "X", "name": f"step {s}", "cat": "user_annotation", "ts": s * 100, "dur": 90, "pid": 1, "tid": 1}
          for s in range(2)] + [{"ph": "X", "name": "k", "cat": "kernel", "ts": s * 100 + 10 + 30 * i, "dur": 20,
                                 "pid": 0, "tid": 7, "args": {"stream": 7, "device": 0}}
                                for s in range(2) for i in range(2)]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "in.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": EVENTS}).encode()))
    return path


def _refused(r: subprocess.CompletedProcess, out: str, src: str) -> None:
    assert r.returncode == 1, (r.stdout, r.stderr)
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("polyprof: error: ") and out in line and src in line and "would replace" in line, line


def test_the_trace_reads(trace, tmp_path):  # the input is one polyprof reads: the refusals below are the check's
    r = _cli("report", trace.name, "-o", "r.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r.html").read_bytes().startswith(b"<!")


def test_run_refuses_its_script_as_output(tmp_path):
    # before: the script was replaced by the trace (a zip), exit 0
    script = tmp_path / "prog.py"
    script.write_text("open('ran', 'w').close()\nprint('prog ran')\n")
    before = script.read_bytes()
    r = _cli("run", "--plugins", "host", "-o", "prog.py", "prog.py", cwd=tmp_path)
    _refused(r, "prog.py", "script prog.py")
    assert script.read_bytes() == before and not (tmp_path / "ran").exists()  # the program did not run
    assert r.stdout == ""


def test_run_refuses_a_script_whose_default_output_is_itself(tmp_path):
    script = tmp_path / "x.polyprof"  # python runs any file: x.polyprof's trace would be x.polyprof
    script.write_text("print('ran')\n")
    r = _cli("run", "--plugins", "host", "x.polyprof", cwd=tmp_path)
    _refused(r, "x.polyprof", "script x.polyprof")
    assert script.read_text() == "print('ran')\n"


def test_run_refuses_a_link_to_its_script_even_when_following_links(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("print('ran')\n")
    (tmp_path / "t.polyprof").symlink_to(script)
    r = _cli("run", "--plugins", "host", "--follow-symlinks", "-o", "t.polyprof", "prog.py", cwd=tmp_path)
    _refused(r, "t.polyprof", "prog.py")
    assert script.read_text() == "print('ran')\n"


def test_report_refuses_its_input_as_output(trace, tmp_path):
    # before: the trace was replaced by the HTML report, exit 0
    before = trace.read_bytes()
    r = _cli("report", "in.json.gz", "-o", "in.json.gz", cwd=tmp_path)
    _refused(r, "in.json.gz", "input in.json.gz")
    assert trace.read_bytes() == before


def test_report_refuses_its_default_output_when_it_is_the_input(trace, tmp_path):
    """A trace named .html: its default page is ``run.html.html`` (the name without a trace
    ending, which .html is not), never the input (before: ``run.html``, refused); the
    input as ``-o`` is refused."""
    (tmp_path / "run.html").write_bytes(trace.read_bytes())
    r = _cli("report", "run.html", "-o", "run.html", cwd=tmp_path)
    _refused(r, "run.html", "input run.html")
    assert (tmp_path / "run.html").read_bytes() == trace.read_bytes()
    r = _cli("report", "run.html", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "run.html.html").is_file(), r.stderr
    assert (tmp_path / "run.html").read_bytes() == trace.read_bytes()


def test_report_refuses_a_hard_link_of_its_input(trace, tmp_path):
    os.link(trace, tmp_path / "same.json.gz")
    r = _cli("report", "in.json.gz", "-o", "same.json.gz", cwd=tmp_path)
    _refused(r, "same.json.gz", "in.json.gz")
    assert gzip.decompress(trace.read_bytes()).startswith(b"{")


@pytest.mark.parametrize("spelling", ["in.json.gz", "./sub/../in.json.gz"])
def test_export_refuses_its_input_as_output(trace, tmp_path, spelling):
    (tmp_path / "sub").mkdir()
    before = trace.read_bytes()
    r = _cli("export", "in.json.gz", "-f", "perfetto", "-o", spelling, cwd=tmp_path)
    _refused(r, spelling, "input in.json.gz")
    assert trace.read_bytes() == before


def test_export_refuses_a_link_to_its_input_with_force(trace, tmp_path):
    (tmp_path / "out.json.gz").symlink_to(trace)
    before = trace.read_bytes()
    r = _cli("export", "in.json.gz", "--force", "-o", "out.json.gz", cwd=tmp_path)
    _refused(r, "out.json.gz", "in.json.gz")
    assert trace.read_bytes() == before


def test_diff_refuses_either_run_as_output(trace, tmp_path):
    other = tmp_path / "b.json.gz"
    other.write_bytes(trace.read_bytes())
    for target in ("in.json.gz", "b.json.gz"):
        r = _cli("diff", "in.json.gz", "b.json.gz", "-o", target, cwd=tmp_path)
        _refused(r, target, "input " + target)
    assert other.read_bytes() == trace.read_bytes()


def test_refuse_over_inputs_by_path_and_error_type(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("a")
    with pytest.raises(OutputOverInputError) as e:
        refuse_over_inputs(tmp_path / "x" / ".." / "a.txt", [tmp_path / "b.txt", a])
    assert isinstance(e.value, OutputError) and isinstance(e.value, PolyprofError)
    assert str(e.value) == f"{tmp_path / 'x' / '..' / 'a.txt'}: the output is the input {a}; writing it would " \
                           "replace the input: choose another output path"
    refuse_over_inputs(tmp_path / "c.txt", [a, tmp_path / "missing.txt"])  # another path: nothing raised
    refuse_over_inputs(tmp_path / "c.txt", [])


def test_run_names_its_own_flag_for_a_planted_link(tmp_path):
    # before: "(--force / force=True writes through it)": run has no --force, its flag is --follow-symlinks
    (tmp_path / "prog.py").write_text("print('ran')\n")
    (tmp_path / "elsewhere").write_text("old")
    (tmp_path / "t.polyprof").symlink_to(tmp_path / "elsewhere")
    r = _cli("run", "--plugins", "host", "--no-summary", "-o", "t.polyprof", "prog.py", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert "--follow-symlinks" in r.stderr and (tmp_path / "elsewhere").read_text() == "old"


def test_demo_says_where_the_trace_really_went(tmp_path):
    # before: the last line said "trace written to demo.polyprof; try `polyprof report demo.polyprof ...`"
    # while the trace was in /tmp and demo.polyprof (a planted link here) still held the old content
    (tmp_path / "old").write_text("old")
    (tmp_path / "demo.polyprof").symlink_to(tmp_path / "old")
    r = _cli("demo", "-w", "threads", "--plugins", "host", "-o", "demo.polyprof", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    where = last.split("trace written to ", 1)[1].split(" ", 1)[0]
    assert " instead of demo.polyprof " in last and where != "demo.polyprof", last
    assert f"`polyprof report {where} -o demo.html`" in last
    try:
        assert Path(where).is_file() and (tmp_path / "old").read_text() == "old"
    finally:
        Path(where).unlink(missing_ok=True)
