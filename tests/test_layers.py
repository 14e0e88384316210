"""Import direction: the layer order written in docs/architecture.md, checked on every
module's imports (top-level and in-function; ``if TYPE_CHECKING:`` imports are
annotations only and not counted), with the short list of exceptions below; and no
import cycle between modules, but the listed ones.

The tests that the check itself works add an upward import (a temporary module in a
copy of the tree, and an edge in a parsed graph) and a cycle, and see them caught."""

from __future__ import annotations

import ast
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src" / "polyprof"
DOC = ROOT / "docs" / "architecture.md"

#: (importer, imported module) -> why this upward import stays, for now. Each entry must
#: still be needed (test_every_exception_is_still_needed).
UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {}

#: import cycles (sets of modules) that stay, for now, and why: none (the last,
#: Trace.extend -> merge -> builder -> Trace, went when the builder's gathering moved
#: below the Trace class, trace/assemble.py)
CYCLE_EXCEPTIONS: dict[frozenset[str], str] = {}


#: in-function imports of polyprof's own modules are allowed, with their reason, in these
#: modules (prefix -> why: each buys start-up time measured in docs/benchmarks.md, "What
#: `polyprof run` adds to a run", or keeps a heavy dependency off a path that does not use it)
LAZY_BY_DESIGN = {
    "polyprof.cli.": "the CLI builds only the given command's parser; a command imports its work when it runs",
    "polyprof.cli": "the same: `polyprof run` must not import the analyses",
    "polyprof": "`import polyprof` imports no more than the recorder, on first use (a program that marks sections needs no NumPy; the CLI none of it)",
    "polyprof.collect.session": "a session imports nesting, schedules and subsets only when it uses them",
    "polyprof.collect.registry": "discovery loads each plugin's class only, and native plugins only when listed",
    "polyprof.plugins.": "what records a device is imported when the program imports its framework",
    "polyprof.formats.registry": "a format's modules are imported when that format is read or written",
    "polyprof.capture": "the gRPC server and its protobufs only when a capture is served",
}
#: in-function imports of polyprof modules elsewhere with no reason on their line or the
#: line above: at most this many (it may only go down; each should get its reason or move
#: to the top of its module)
#: (102 when this check came; 78 once collect/ said why; 26 once the lower floors did; 0 once ranks/ did)
UNEXPLAINED_LIMIT = 0


# ------------------------------------------------------------------ the layer table
def layers(doc: str | None = None) -> dict[str, int]:
    """Package (or top-level module) -> its floor, from the ```layers block of
    docs/architecture.md (lowest first)."""
    text = DOC.read_text() if doc is None else doc
    m = re.search(r"```layers\n(.*?)```", text, re.S)
    assert m, "docs/architecture.md has no ```layers block"
    out: dict[str, int] = {}
    for i, line in enumerate(l for l in m.group(1).splitlines() if l.strip()):
        _, _, names = line.partition(":")
        for name in names.split("#")[0].split():
            assert name not in out, f"{name} is on two floors"
            out[name] = i
    return out


def unit(module: str) -> str:
    """What a module's floor is looked up by: its package under polyprof (``trace``),
    or the top-level module's name (``errors``), or ``polyprof`` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


# ------------------------------------------------------------------ the import graph
class Import:
    def __init__(self, importer: str, imported: str, line: int, in_function: bool):
        self.importer, self.imported, self.line, self.in_function = importer, imported, line, in_function

    def __repr__(self) -> str:
        where = "in a function" if self.in_function else "at the top"
        return f"{self.importer}:{self.line} imports {self.imported} ({where})"


def module_names(src: Path) -> set[str]:
    """Every module of the tree: .py files, and compiled extensions (by their .c source)."""
    out = set()
    for p in [*src.rglob("*.py"), *src.rglob("*.c")]:
        parts = list(p.relative_to(src.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.add(".".join(parts))
    return out


def imports(src: Path = SRC) -> list[Import]:
    """:func:`parse_imports`, of this tree parsed once per test run."""
    if src != SRC:
        return parse_imports(src)
    if not _PARSED:
        _PARSED.extend(parse_imports(SRC))
    return list(_PARSED)


_PARSED: list[Import] = []


def parse_imports(src: Path) -> list[Import]:
    """Every import of a polyprof module in the tree at ``src`` (the ``polyprof`` folder),
    resolved to the module imported (``from .x import name`` -> ``..x``; ``from . import
    mod`` -> ``.mod``), except those under ``if TYPE_CHECKING:``."""
    mods = module_names(src)
    out: list[Import] = []
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        me = ".".join(parts)
        tree = ast.parse(path.read_text(), str(path))
        skip: set[int] = set()
        inside: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inside.update(id(n) for n in ast.walk(node) if n is not node)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parts if is_pkg else parts[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                found = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names]
            for name in found:
                while name and name not in mods:  # polyprof.x.func -> polyprof.x
                    name = name.rpartition(".")[0]
                if name and name != me and name.split(".")[0] == "polyprof":
                    out.append(Import(me, name, node.lineno, id(node) in inside))
    return out


def upward(edges: list[Import], floors: dict[str, int]) -> list[Import]:
    """The imports of a higher floor by a lower one."""
    return [e for e in edges if floors[unit(e.imported)] > floors[unit(e.importer)]]


def cycles(edges: list[Import]) -> list[frozenset[str]]:
    """The import cycles: strongly connected sets of two or more modules (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.importer].add(e.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


# ------------------------------------------------------------------ the checks
def test_every_package_has_a_floor():
    floors = layers()
    units = {unit(m) for m in module_names(SRC)}
    assert units - set(floors) == set(), "add these to the ```layers block of docs/architecture.md"
    assert set(floors) - units == set(), "the ```layers block names packages that do not exist"


def test_no_lower_floor_imports_a_higher_one():
    bad = [e for e in upward(imports(), layers()) if (e.importer, e.imported) not in UPWARD_EXCEPTIONS]
    assert bad == [], "\n".join(map(repr, bad))


def test_every_exception_is_still_needed():
    edges = {(e.importer, e.imported) for e in imports()}
    assert [k for k in UPWARD_EXCEPTIONS if k not in edges] == []
    assert [sorted(c) for c in CYCLE_EXCEPTIONS if c not in set(cycles(imports()))] == []


def test_no_import_cycle():
    bad = [sorted(c) for c in cycles(imports()) if c not in CYCLE_EXCEPTIONS]
    assert bad == []


def test_an_added_upward_import_is_caught(tmp_path):
    """A copy of the tree with one more module on the trace floor that imports the
    report floor (in a function, where such imports hide): the check names it."""
    tree = tmp_path / "polyprof"
    shutil.copytree(SRC, tree, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*_pb2.py", "*.html", "*.proto"))
    (tree / "trace" / "upstairs.py").write_text("def f():\n    from ..report import terminal\n    return terminal\n")
    bad = [e for e in upward(imports(tree), layers()) if (e.importer, e.imported) not in UPWARD_EXCEPTIONS]
    assert [(e.importer, e.imported, e.in_function) for e in bad] == [
        ("polyprof.trace.upstairs", "polyprof.report.terminal", True)]


def test_an_upward_edge_in_a_parsed_graph_is_caught():
    edges = imports()
    floors = layers()
    before = len(upward(edges, floors))
    edges.append(Import("polyprof.derive.steps", "polyprof.analyze.steps", 1, False))
    after = upward(edges, floors)
    assert len(after) == before + 1 and after[-1].importer == "polyprof.derive.steps"


def test_an_added_cycle_is_caught():
    edges = imports()
    edges.append(Import("polyprof.trace.keys", "polyprof.trace.metadata_keys", 1, True))
    edges.append(Import("polyprof.trace.metadata_keys", "polyprof.trace.keys", 1, True))
    assert frozenset({"polyprof.trace.keys", "polyprof.trace.metadata_keys"}) in cycles(edges)


def test_the_old_extend_cycle_would_be_caught():
    """``Trace.extend`` importing merge again (in a function, as it once did) closes
    core -> merge -> builder -> core: test_no_import_cycle's check names it."""
    edges = imports()
    edges.append(Import("polyprof.trace.core", "polyprof.trace.merge", 1, True))
    bad = [c for c in cycles(edges) if c not in CYCLE_EXCEPTIONS]
    assert frozenset({"polyprof.trace.core", "polyprof.trace.merge", "polyprof.trace.builder"}) in bad


def _lazy_reason(e: Import, lines: dict[str, list[str]]) -> bool:
    if any(e.importer == p or (p.endswith(".") and e.importer.startswith(p)) for p in LAZY_BY_DESIGN):
        return True
    text = lines[e.importer]
    here = text[e.line - 1] if e.line <= len(text) else ""
    above = text[e.line - 2].strip() if e.line >= 2 else ""
    return "#" in here or above.startswith("#")


def _sources() -> dict[str, list[str]]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path.read_text().splitlines()
    return out


def test_in_function_imports_have_a_reason():
    """An import of a polyprof module inside a function says why (a comment on its line
    or above, or its module's reason in LAZY_BY_DESIGN); the others are counted and may
    only become fewer."""
    lines = _sources()
    unexplained = [e for e in imports() if e.in_function and not _lazy_reason(e, lines)]
    assert len(unexplained) <= UNEXPLAINED_LIMIT, "\n".join(map(repr, unexplained))
    # the check sees a bare one
    lines["polyprof.trace.keys"] = ["def f():", "    from . import metadata_keys"]
    bare = Import("polyprof.trace.keys", "polyprof.trace.metadata_keys", 2, True)
    assert not _lazy_reason(bare, lines)
    lines["polyprof.trace.keys"][1] += "  # a reason"
    assert _lazy_reason(bare, lines)
