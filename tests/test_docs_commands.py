"""The commands the README and docs/*.md show, as a user types them.

- Every ``polyprof ...`` command of the user docs (fenced blocks and inline code) is
  parsed by polyprof's own argument parser: a flag renamed or removed in the code, or
  misspelt in a doc, fails here. Synopsis lines (``[--json]``, ``A|B``, ``...``) are
  left out: they are not commands.
- Every dotted name ``polyprof.x.y`` the user docs show is a module or an attribute
  that exists (an API renamed in the code and not in the docs fails here).
- The fenced blocks marked ``docs-test`` (```` ```bash docs-test ````) are run, line by
  line, from a directory where ``tests/`` is the repository's: each line must exit 0
  and write the file it names with ``-o``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from polyprof import cli

ROOT = Path(__file__).resolve().parents[1]
#: the user docs; benchmarks.md, decisions.md and architecture.md are for developers
USER_DOCS = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md"))
                                   if p.name not in {"benchmarks.md", "decisions.md", "architecture.md"})]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(polyprof [^`\n]+)`")
COMMAND = re.compile(r"\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*polyprof\s")
#: code spans that read like commands and are not: the name of an XLine (docs/plugins.md)
NOT_COMMANDS = {"polyprof counters"}
SYNOPSIS = re.compile(r"[\[\]|]|\.\.\.|…")


def _blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(path.read_text(encoding="utf-8"))]


def _commands(text: str) -> list[str]:
    """The ``polyprof`` commands in shell text: comments dropped, ``&&`` chains split,
    leading ``NAME=value`` assignments dropped."""
    found = []
    for line in text.splitlines():
        for part in line.split("&&"):
            if not COMMAND.match(part):  # prose, output, a file tree
                continue
            words = shlex.split(part, comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words.pop(0)
            if words and words[0] == "polyprof":
                found.append(shlex.join(words))
    return found


def _documented() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in USER_DOCS:
        shell = [body for info, body in _blocks(path) if info.split()[:1] in ([], ["bash"], ["sh"])]
        out += [(path.name, c) for body in shell for c in _commands(body) if not SYNOPSIS.search(c)]
    return out


def _inline() -> list[tuple[str, str]]:
    """Commands named in the prose (`polyprof sql FILE --derive`): often a command's
    name and a flag or two, not a whole command line."""
    out: list[tuple[str, str]] = []
    for path in USER_DOCS:
        prose = FENCE.sub("", path.read_text(encoding="utf-8"))
        out += [(path.name, m.group(1)) for m in INLINE.finditer(prose) if m.group(1) not in NOT_COMMANDS]
    return out


DOCUMENTED = _documented()


def test_the_docs_show_commands():
    names = {doc for doc, _ in DOCUMENTED}
    assert {"README.md", "ranks.md", "store.md", "capture.md", "plugins.md"} <= names, names
    assert len(DOCUMENTED) > 40


@pytest.mark.parametrize("doc,command", DOCUMENTED, ids=[f"{d}:{c[:60]}" for d, c in DOCUMENTED])
def test_documented_command_parses(doc, command, capsys):
    argv = shlex.split(command)[1:]
    name = cli.command_of(argv)
    assert name is not None or argv in ([], ["--help"]), f"{doc}: {command}: no such command"
    parser = cli.build_parser(only=name)
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{doc}: `{command}` does not parse: {capsys.readouterr().err.strip()} (exit {e.code})")


INLINE_COMMANDS = _inline()


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


@pytest.mark.parametrize("doc,command", INLINE_COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in INLINE_COMMANDS])
def test_command_named_in_prose_exists_with_its_flags(doc, command):
    words = command.split()
    name = cli.command_of(words[1:])
    if words[1].startswith("-") and name is None:  # polyprof -vv ...: the top-level options
        assert {w for w in words[1:] if w.startswith("-")} <= _options(cli.build_parser(only="")), command
        return
    assert name is not None, f"{doc}: `{command}`: no such command"
    parser = cli.build_parser(only=name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    flags = {w.split("=")[0] for w in words[2:] if w.startswith("-") and w != "--"}
    assert flags <= _options(sub) | _options(parser), f"{doc}: `{command}`: no option {flags - _options(sub)}"


def _marked() -> list[tuple[str, str]]:
    return [(p.name, c) for p in USER_DOCS for info, body in _blocks(p)
            if "docs-test" in info.split()[1:] for c in _commands(body)]


MARKED = _marked()


def test_readme_has_a_block_marked_to_run():
    assert any(doc == "README.md" for doc, _ in MARKED)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("docs")
    (d / "tests").symlink_to(ROOT / "tests")
    return d


@pytest.mark.parametrize("doc,command", MARKED, ids=[f"{d}:{c[:60]}" for d, c in MARKED])
def test_marked_command_runs(doc, command, workdir):
    argv = shlex.split(command)
    r = subprocess.run([sys.executable, "-m", "polyprof", *argv[1:]], cwd=workdir, capture_output=True,
                       text=True, timeout=240, env=_env())
    assert r.returncode == 0, f"{doc}: `{command}` exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("-o", "--output")
    known, _ = out.parse_known_args(argv[1:])
    if known.output:
        written = workdir / known.output
        assert written.exists() and (written.is_dir() or written.stat().st_size > 0), f"{doc}: `{command}`"
    else:
        assert r.stdout.strip(), f"{doc}: `{command}` printed nothing"


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ, COLUMNS="80")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


#: dotted names in the docs that are not Python: stat, metadata and file-part names
NOT_API = {
    "polyprof.partial": "the crash journal's file suffix (train.polyprof.partial)",
    "polyprof.category": "an XStat name a native plugin may set (docs/plugins.md)",
    "polyprof.counter_value": "an XStat name (docs/plugins.md)",
    "polyprof.producer": "an XPlane stat name (docs/plugins.md)",
    "polyprof.added": "an XPlane stat name of the XSpace writer (docs/analysis.md)",
    "polyprof.layout": "a key of the .polyprof file's Arrow metadata (docs/formats.md)",
    "polyprof.flows": "a key of the .polyprof file's Arrow metadata (docs/formats.md)",
    "polyprof.counters": "a key of the .polyprof file's Arrow metadata (docs/formats.md)",
    "polyprof.flows.base64": "a key of the Parquet export's footer metadata (docs/formats.md)",
    "polyprof.counters.base64": "a key of the Parquet export's footer metadata (docs/formats.md)",
    "polyprof.analyses": "an entry-point group: analyses of other packages (docs/plugins.md)",
    "polyprof.findings": "an entry-point group: finding rules of other packages (docs/plugins.md)",
}
DOTTED = re.compile(r"\b(polyprof(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for j, attr in enumerate(parts[i:], start=i):
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
                continue
            try:  # a submodule not imported by its package
                obj = importlib.import_module(".".join(parts[:j + 1]))
            except ImportError:
                return False
        return True
    return False


def test_every_dotted_polyprof_name_in_the_docs_exists():
    names = {m.group(1) for p in USER_DOCS for m in DOTTED.finditer(p.read_text(encoding="utf-8"))}
    assert len(names) > 20
    missing = sorted(n for n in names - NOT_API.keys() if not _resolves(n))
    assert not missing, f"named in the docs, not in polyprof: {missing}"
