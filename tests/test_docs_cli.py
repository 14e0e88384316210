"""What a user reading the docs sees of the command: every ``--help`` fits 80 columns,
its examples parse, and ``polyprof plugins`` prints a plugin's reason as written (no markup eaten)."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from polyprof import cli
from polyprof.cli import plugins as plugins_cmd
from polyprof.collect.plugin import Availability
from polyprof.collect.registry import PluginInfo


def _help(command: str | None) -> str:
    parser = cli.build_parser(only=command)
    if command is not None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[command]
    return parser.format_help()


@pytest.mark.parametrize("command", [None, *cli.COMMANDS])
def test_help_fits_80_columns(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse's width comes from the terminal's size
    text = _help(command)
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, f"polyprof {command or ''} --help has lines over 80 columns: {long}"
    # a description is printed as written ('%%' stays doubled); only help strings are %-formatted
    assert "%%" not in text, f"polyprof {command or ''} --help prints '%%'"
    # an option named in a text is never broken at its hyphen ("--token-" / "file")
    assert not [ln for ln in text.splitlines() if ln.rstrip().endswith("-") and not ln.rstrip().endswith(" -")], \
        f"polyprof {command or ''} --help breaks a word at a hyphen"


@pytest.mark.parametrize("command", ["run", "summary", "report", "export", "diff", "convert", "capture",
                                     "critical-path"])
def test_each_command_help_ends_with_examples_that_parse(command):
    """Each command's ``--help`` ends with its examples, and each one is a command line
    its parser takes (a shell redirection left out); a renamed option fails here."""
    parser = cli.build_parser(only=command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    examples = sub.choices[command].examples
    text = _help(command)
    assert len(examples) >= 2 and text.index("examples:") > text.index("options:")
    for line, what in examples:
        assert line in text and what.split()[0] in text
        argv = line.split(" > ")[0].split()
        assert argv[0] == "polyprof" and argv[1] in cli.COMMANDS, line
        args = cli.build_parser(only=argv[1]).parse_args(argv[1:])  # (argparse exits on a bad line)
        assert args.command == argv[1]


def test_plugins_prints_a_reason_with_brackets_as_written(monkeypatch):
    reason = "cupti-python is not installed (pip install 'polyprof[cuda]')"
    found = {"fake": PluginInfo("fake", "fake_pkg:FakePlugin", None, Availability(False, reason), True)}
    monkeypatch.setattr("polyprof.collect.registry.discover", lambda session=False: found)
    monkeypatch.setenv("COLUMNS", "200")  # one line per row, so the reason is not folded
    out = io.StringIO()
    with redirect_stdout(out):
        assert plugins_cmd.run(argparse.Namespace()) == 0
    assert "'polyprof[cuda]'" in out.getvalue(), out.getvalue()


def test_summary_of_a_one_rank_store_says_it_is_one_rank(tmp_path):
    """`polyprof summary STORE` of a store of one trace (docs/store.md) said "1 of 1 on
    rank 0's clock from collectives (bound at most 0 ns)": nothing was aligned."""
    trace = Path(__file__).parent / "data" / "traces" / "gloo" / "gloo_rank0.json.gz"
    store = tmp_path / "one.store"
    env = dict(os.environ, COLUMNS="80")
    subprocess.run([sys.executable, "-m", "polyprof", "convert", str(trace), "-o", str(store)], check=True,
                   capture_output=True, env=env, timeout=120)
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(store)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    head = " ".join(r.stdout.splitlines()[:2])
    assert "1 rank," in head and "rank 0 alone, on its own clock" in head, head
    assert "from collectives" not in head


def test_a_window_of_one_step_reads_as_one_step():
    """`--steps 552:553` printed "analysed window: steps 552 of 551-552"; a schedule that
    kept one step, "all 1 steps (0)"."""
    trace = Path(__file__).parent / "data" / "traces" / "kineto" / "sampled_rank0.json.gz"
    import polyprof
    from polyprof.analyze.window import Window, select

    t = polyprof.load(trace)
    assert select(t, Window(start=552, stop=553)).label.startswith("step 552 of 551-552")
    assert select(t, Window(start=551, stop=553)).label.startswith("all 2 steps (551-552)")


TRACES = Path(__file__).parent / "data" / "traces"
#: table title -> the columns it must keep in 80 columns
KEY_COLUMNS = {
    "Top device activity": ("name", "count", "total", "share"),
    "Top framework ops": ("name", "count", "total", "self"),
    "Device time": ("stream", "compute", "idle"),
    "Ranks side by side": ("rank", "step mean", "communication"),
}


@pytest.mark.parametrize("path", ["kineto/a100_nccl_rank0.json.gz", "kineto/mi250_rocm_minitoy.json.gz",
                                  "xspace/tpu_inference_2.xplane.pb", "gloo"])
def test_summary_fits_80_columns_with_its_key_columns(path):
    """`COLUMNS=80 polyprof summary` of the shared traces: no line wider than the
    terminal, and each table keeps the columns it is read by (optional ones leave)."""
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(TRACES / path)], capture_output=True,
                       text=True, env=dict(os.environ, COLUMNS="80"), timeout=240)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert not [x for x in lines if len(x) > 80], [x for x in lines if len(x) > 80][:3]
    wide = _tables(subprocess.run([sys.executable, "-m", "polyprof", "summary", str(TRACES / path)],
                                  capture_output=True, text=True, env=dict(os.environ, COLUMNS="400"),
                                  timeout=240).stdout.splitlines())
    seen = 0
    for title, (heads, _) in _tables(lines).items():
        # a key column may leave only where it has nothing to show (every row "-": a
        # CPU-only job's step times and device shares)
        blank = {h for k, h in enumerate(wide[title][0]) if all(r[k] == "-" for r in wide[title][1])}
        assert set(KEY_COLUMNS[title]) - blank <= set(heads), (title, heads)
        assert not blank & set(heads) or len(heads) == len(wide[title][0]), (title, heads)
        seen += 1
    assert seen >= 1, r.stdout[:2000]


def _tables(lines: list[str]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Each table of KEY_COLUMNS in a summary's lines: its headers and its rows' cells."""
    out = {}
    for i, line in enumerate(lines):
        title = next((t for t in KEY_COLUMNS if line.startswith(t)), None)
        if title is None:
            continue
        box = [x for x in lines[i + 1:] if x[:1] in "┏┃┡│└"]
        box = box[:next(k for k, x in enumerate(box) if x.startswith("└"))]
        cells = [[c.strip() for c in x.strip("┃│").split("┃" if x[0] == "┃" else "│")] for x in box
                 if x[0] in "┃│"]
        out[title] = (cells[0], cells[1:])
    return out
