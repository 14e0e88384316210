"""polyprof diff: what got slower or faster between two runs (terminal tables, --json, -o HTML).

``polyprof diff A B`` compares two runs; ``polyprof diff A1 A2 -- B1 B2`` compares several
runs of each side (replicates). Each run is a trace file, a directory of its ranks'
trace files, or a store; a directory whose trace files are in subdirectories is a
directory of runs, one per subdirectory.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ..analyze.diff import Diff
    from ..analyze.table import Table
    from ..ranks.traceset import TraceSet
    from ..report.grid import Grid

from ..errors import OutputError, PolyprofError
from .common import HTML, Subparsers, check_output, count, names_directory, output_path, seconds
from .common import console as piped

#: changes named per direction in the verdict, at most
VERDICT_TOP = 5


def _options(p: argparse.ArgumentParser) -> None:
    """Every option of the command (parsed again after the runs, which may hold ``--``)."""
    p.add_argument("-n", "--top", type=count, default=15,
                   help="rows per table (default 15; 0: the verdict alone, no tables; --json has every row); "
                        f"the verdict names at most {VERDICT_TOP} changes each way (at most -n, where it is 1 or more)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level, after the correction for testing many rows (default 0.05)")
    p.add_argument("--min-change-pct", type=seconds, default=5.0, metavar="PCT",
                   help="smallest change called a change, in percent of A's time per step (default 5)")
    p.add_argument("--min-change-us", type=seconds, default=20.0, metavar="US",
                   help="smallest change called a change, in µs per step (default 20)")
    p.add_argument("--correction", choices=("holm", "bh"), default="holm",
                   help="correction for testing many rows: holm (family-wise, default) or bh "
                        "(Benjamini-Hochberg false-discovery rate)")
    p.add_argument("--test", choices=("t", "rank"), default="t",
                   help="t: Student's t on log time per step (default); rank: Mann-Whitney U (its smallest p is "
                        "bounded by the runs a side: the verdict says where no row can be called)")
    p.add_argument("--raw-names", action="store_true",
                   help="match names exactly (default: normalised and renames that keep their role merged, "
                        "see docs/analysis.md)")
    p.add_argument("--json", action="store_true", help="print the tables and the verdict as JSON")
    p.add_argument("-o", "--output", metavar="FILE.html",
                   help="also write the diff as one self-contained HTML file (tables side by side, the changes "
                        "charted, per-step distributions); works offline. A file there is replaced only if it is "
                        "a polyprof page")
    p.add_argument("--force", action="store_true",
                   help="replace a file at -o that is not a polyprof page, or write through a symbolic link there "
                        "(both refused by default)")
    p.add_argument("--wide", action="store_true",
                   help="every column of the tables, whatever the terminal's width")
    from .common import add_window_args

    add_window_args(p, "the steps compared, in every trace of both runs (default: as `summary`, every step "
                       "but the first, the warm-up, when there are 3 or more)")


#: what ``polyprof diff --help`` ends with
EXAMPLES = [
    ("polyprof diff before.polyprof after.polyprof", "what got slower or faster, row by row, beyond the noise"),
    ("polyprof diff a1.polyprof a2.polyprof -- b1.polyprof b2.polyprof",
     "two runs a side: the noise between runs is measured, not assumed"),
    ("polyprof diff before/ after/ -o diff.html", "two jobs (directories of rank traces); the tables as HTML too"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "diff", examples=EXAMPLES, help="compare two runs: what got slower or faster, beyond the noise",
        usage="polyprof diff [options] A B\n       polyprof diff [options] A1 A2 ... -- B1 B2 ...",
        description="Per kernel, framework op and section: counts and time in run A and run B, the change per "
                    "step, and whether it is beyond the noise (a t test per rank, ranks combined, corrected for "
                    "testing many rows) and above the effect floor. A run is a trace file, a directory of its "
                    "ranks' files, or a store; several runs a side (replicates) go before and after `--`, or "
                    "as a directory of run directories.")
    p.add_argument("runs", nargs=argparse.REMAINDER, metavar="RUN",
                   help="A B, or A1 A2 ... -- B1 B2 ...")
    _options(p)
    p.set_defaults(func=run)


def _parse_runs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The runs of A and of B, and the options given among them (set on ``args``)."""
    inner = argparse.ArgumentParser(prog="polyprof diff", add_help=False)
    inner.add_argument("paths", nargs="*")
    _options(inner)
    tokens = list(args.runs)
    sides = [tokens[:tokens.index("--")], tokens[tokens.index("--") + 1:]] if "--" in tokens else [tokens]
    found = []
    for side in sides:
        ns, extra = inner.parse_known_args(side, namespace=argparse.Namespace(**vars(args)))
        if extra:
            raise PolyprofError(f"diff: unknown option {extra[0]!r} (see polyprof diff -h)")
        for k, v in vars(ns).items():
            if k != "paths" and v != inner.get_default(k):
                setattr(args, k, v)
        found.append(ns.paths)
    if len(found) == 1:
        if len(found[0]) != 2:
            raise PolyprofError(f"diff: expected two runs, A B (or A1 A2 ... -- B1 B2 ...), got {len(found[0])}")
        return [found[0][0]], [found[0][1]]
    if not found[0] or not found[1]:
        raise PolyprofError("diff: give at least one run before and one after `--` (A1 A2 -- B1 B2)")
    return found[0], found[1]


def run(args: argparse.Namespace) -> int:
    from ..analyze.diff import Runs, diff
    from .common import window_from

    a_paths, b_paths = _parse_runs(args)
    if args.output:  # before anything is read
        if names_directory(args.output):
            raise OutputError(f"{args.output}: a directory; -o names the HTML file to write (-o "
                              f"{os.path.join(args.output, 'diff.html')})")
        check_output(args.output, [*a_paths, *b_paths], HTML, args.force)
    from .memory_check import check_diff  # (light: imports fits only for JSON traces or stores)

    check_diff([*a_paths, *b_paths])
    window = window_from(args)
    sides: dict[str, tuple[Runs, list[list[str]]]] = {}
    for side, paths in (("a", a_paths), ("b", b_paths)):
        runs: list[TraceSet] = []
        shown: list[list[str]] = []
        for path in paths:
            for r, names in _runs_at(path):
                runs.append(r)
                shown.append(names)
        _no_repeats(side, shown)
        sides[side] = (Runs(runs), shown)
    d = diff(sides["a"][0], sides["b"][0], alpha=args.alpha, normalize=not args.raw_names,
             top=min(args.top, VERDICT_TOP) or VERDICT_TOP, window=window, rel_floor=args.min_change_pct / 100.0,
             abs_floor_ns=args.min_change_us * 1000.0, correction=args.correction, test=args.test)
    for side in ("a", "b"):
        d.overview[side]["paths"] = [p for names in sides[side][1] for p in names]
    if args.output:
        from ..report.diff_html import write

        write(d, output_path(args.output), force=args.force)
    if args.json:
        sys.stdout.buffer.write(to_json(d))
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return 0
    render(d, args.top, wide=args.wide)
    if args.output:
        print(f"HTML diff written to {args.output}")
    return 0


def _runs_at(path: str) -> list[tuple[TraceSet, list[str]]]:
    """The runs at ``path``: one (a file, a directory of rank files, a store, a log
    directory of ``jax.profiler.trace``), or one per subdirectory of a directory of runs;
    each with its paths."""
    from ..ranks.sources import is_logdir, rank_files
    from ..store.manifest import is_store

    p = Path(path)
    if p.is_dir() and not is_store(p) and not is_logdir(p):  # (a log directory: one run, its latest)
        files = rank_files(p)  # other packages' formats' files too
        subdirs = sorted(q for q in p.iterdir() if q.is_dir() and not q.name.startswith("."))
        if files and subdirs:  # by their first bytes: a run's notes beside the runs (r1.truth.json) are no rank
            files = [q for q in files if _is_trace(q)]
        if not files and subdirs:
            return [_run_of(str(q)) for q in subdirs]
    return [_run_of(path)]


def _no_repeats(side: str, runs: list[list[str]]) -> None:
    """Refuse a side whose runs hold one trace twice (a path repeated, by a glob or a
    script, or a byte copy: the same size and first MiB): the runs' spread, which the
    test weighs the change by, would be none, and one run a side read as a replicated
    verdict (p=1.2e-08 where one run a side says it cannot tell run-to-run variation)."""
    import hashlib

    seen: dict[tuple[int, bytes], str] = {}
    for names in runs:
        for name in names:
            p = Path(name)
            if not p.is_file():
                continue
            with open(p, "rb") as f:
                key = (p.stat().st_size, hashlib.blake2b(f.read(1 << 20), digest_size=16).digest())
            if key in seen:
                same = "the same file" if os.path.realpath(seen[key]) == os.path.realpath(name) else "byte copies"
                raise PolyprofError(f"diff: {seen[key]} and {name} in {side.upper()} are one trace ({same}): "
                                    "give each run once (runs of one program, each recorded apart)")
            seen[key] = name


def _is_trace(path: Path) -> bool:
    """Whether ``path`` may be a trace (a JSON that is not a trace is not a rank), told by
    its first bytes as ``load_ranks`` tells a directory's traces."""
    from ..formats.detect import why_not_a_trace  # (the formats' sniffs: only where a directory is looked at)

    return not why_not_a_trace(path)


def _run_of(path: str) -> tuple[TraceSet, list[str]]:
    """One run: ``polyprof.load_ranks`` of the file, directory or store (each rank loaded
    and reduced in a worker); and its paths (a store's ranks: the store)."""
    from ..ranks.traceset import load_ranks

    ts = load_ranks(path)
    return ts, [str(e.path) for e in ts.entries] if all(e.path is not None for e in ts.entries) else [str(path)]


def to_json(d: Diff) -> bytes:
    """Overview, step time, verdict (text and the significant changes), every table, and
    the per-step samples of the step time and the top rows."""
    import orjson

    from ..analyze.frames import column, labels
    from ..report.tables import _plain

    def plain(v: object) -> object:
        return None if v is None or (isinstance(v, float) and v != v) else v

    tables = {}
    for name, df in d.tables.items():
        cols = labels(df)
        values = [[plain(v) for v in column(df, c).tolist()] for c in cols]
        tables[name] = {"columns": cols, "rows": len(df),
                        "records": [dict(zip(cols, r)) for r in zip(*values)] if cols else []}
    doc = {"overview": d.overview, "step_time": {k: plain(v) for k, v in d.step_time.items()},
           "verdict": {"text": d.verdict, "changes": [{k: plain(v) for k, v in c.items()} for c in d.changes]},
           "tables": tables, "samples": d.samples}
    return orjson.dumps(doc, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2
                        | orjson.OPT_NON_STR_KEYS)


def _signed_ns(ns: float) -> str:
    from ..report.terminal import fmt_ns

    return fmt_ns(ns) if ns != ns or ns <= 0 else "+" + fmt_ns(ns)


def _rel(x: float) -> str:
    return "new" if x != x else "gone" if x == -1 else f"{100 * x:+.1f}%"


def _p(x: float) -> str:
    return "-" if x != x else f"{x:.2g}"


def _num(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.1f}"


def _rank(r: int) -> str:
    return "" if r < 0 else f"r{r}"


def _rank_delta(ns: float) -> str:
    return "" if ns != ns else _signed_ns(ns)


#: the columns of each table: (column, header, formatter); the name, the change per
#: step, its p-value and the verdict are always shown
TABLE_COLUMNS: list[tuple] = [
    ("name", "name", str), ("count_a", "n A", _num), ("count_b", "n B", _num), ("total_ns_a", "total A", None),
    ("total_ns_b", "total B", None), ("delta_total_ns", "Δ total", _signed_ns), ("step_mean_ns_a", "A/step", None),
    ("step_mean_ns_b", "B/step", None), ("rel_change", "Δ%/step", _rel), ("p_adjusted", "p", _p),
    ("change", "change", None)]
#: with several ranks, before p: the rank whose own test gave p (its change per step);
#: A/step and B/step are then the mean over the ranks
RANK_COLUMNS: list[tuple] = [("rank_decided", "rank", _rank), ("rank_step_delta_ns", "rank Δ/step", _rank_delta)]
#: what a narrow terminal leaves out, group by group, until the table fits
DROP_ORDER = [("delta_total_ns",), ("rank_step_delta_ns",), ("count_a", "count_b"), ("total_ns_a", "total_ns_b"),
              ("rank_decided",), ("step_mean_ns_a", "step_mean_ns_b")]
#: a name is never shortened below this (unless every optional column is out)
NAME_MIN = 24


def fit_columns(df: Table, cols: list[tuple], top: int, width: int, title: str = "") -> tuple[Grid, list[str]]:
    """The grid of ``df`` titled ``title`` with as many columns as fit ``width``: optional
    columns leave in :data:`DROP_ORDER`, a group at a time, until the names get at least
    :data:`NAME_MIN` cells; and the headers left out (those ``report/grid._table`` leaves
    out too, narrower still: the rightmost). The names are measured as the table shows
    them (``report/grid.shown_names``: the ops of one XLA module without it, the module
    said in the title); before, ``jit_step/dot.1`` was measured where ``dot.1`` was shown,
    the width wanted never came, and every optional column went, even at 200 columns."""
    from ..report.grid import shown_names
    from ..report.textout import _cells

    names, _, one = shown_names(df, [str(v) for v in column_values(df, "name", top)])
    want = min(NAME_MIN, max(map(_cells, names), default=0))
    gone: set[str] = set()
    for level in range(len(DROP_ORDER) + 1):
        gone = {c for group in DROP_ORDER[:level] for c in group}
        keep = [c for c in cols if c[0] not in gone]
        grid = table_of(df, keep, top, width)
        fits = len(grid.columns) == len(keep) and sum(w + 3 for _, w, _ in grid.columns) + 1 <= width
        if fits and grid.columns[0][1] >= want:
            break
    gone |= {c[0] for c in keep if c[1] not in grid.headers}
    _middle(grid, names)
    # the title of the table, not _table's: the columns it left out are said under the tables
    grid.title = title + (f"  (top {top} of {len(df)})" if len(df) > top else "") + (f"  module: {one}" if one else "")
    return grid, [c[1] for c in cols if c[0] in gone]


def _middle(grid: Grid, names: list[str]) -> None:
    """Names too long for their column shortened in the middle (their start and their
    end kept: kernels differ at both; a ``module/op`` keeps its op), where that keeps
    the rows apart."""
    from ..report.fit import elide
    from ..report.textout import _cells

    width = grid.columns[0][1]
    if all(_cells(n) <= width for n in names):
        return
    tail = round((width - 1) * 0.4)
    # the part after the last "/" kept whole where it fits: an XLA op of its module
    # (``jit_train…/ynn_fusion.3``), the op of a scope
    cut = [elide(n, width, max(tail, min(len(n) - n.rfind("/"), width - 6)) if "/" in n else tail) for n in names]
    if len(set(cut)) == len(set(names)):
        for row, text in zip(grid.rows, cut):
            row[0] = text


def column_values(df: Table, name: str, top: int) -> list[object]:
    from ..analyze.frames import column

    return column(df, name)[:top].tolist()


def table_of(df: Table, cols: list[tuple], top: int, width: int) -> Grid:
    from ..report.grid import _table

    return _table("", df, cols, top, width)


def render(d: Diff, top: int, wide: bool = False, console: Console | None = None) -> None:
    from functools import partial

    from rich.console import Group
    from rich.markup import escape
    from rich.panel import Panel
    from rich.text import Text

    from ..report.terminal import fmt_ns

    console = console or piped(file=sys.stdout)  # (a closed pipe, | head: status 0)
    out = partial(console.print, emoji=False, highlight=False)
    width = 100_000 if wide else console.width
    ov = d.overview

    def side(s: str) -> str:
        o = ov[s]
        runs = f"{o['runs']} runs, " if o["runs"] > 1 else ""
        gone = len(o.get("left_out") or [])  # traces without steps, where the diff is per step (the verdict names them)
        out = f" ({gone} more left out: no steps)" if gone else ""
        return f"{runs}{o['traces']} trace(s){out}, {o['events']} events, {o['steps']} steps"

    out(f"[bold]polyprof diff[/]: A = {escape(side('a'))}; B = {escape(side('b'))}")
    for s in ("a", "b"):
        if ov[s].get("window"):
            out(f"[bold]analysed window[/] {s.upper()}: {escape(ov[s]['window'])}")
    out(Panel(Group(*(Text(line) for line in d.verdict)), title="Verdict", title_align="left"))
    if top < 1:  # -n 0: the verdict alone
        return
    unit = "step" if ov.get("samples", "steps") == "steps" else "trace"  # a trace without steps: one sample
    cols = [(c[0], c[1].replace("/step", f"/{unit}"), c[2] if c[2] is not None or c[0] == "change" else fmt_ns)
            for c in TABLE_COLUMNS]
    ranks = len(ov.get("ranks") or [])
    if ranks > 1:
        at = next(i for i, c in enumerate(cols) if c[0] == "p_adjusted")
        cols[at:at] = [(c[0], c[1].replace("/step", f"/{unit}"), c[2]) for c in RANK_COLUMNS]
    dropped: dict[str, list[str]] = {}  # column -> the tables that left it out
    shown: list[str] = []
    for name, title in (("kernels", "Device activity"), ("ops", "Framework ops (host)"),
                        ("sections", "Sections (host)")):
        df = d.tables[name]
        if not len(df):
            continue
        grid, gone = fit_columns(df, cols, top, width, f"{title}, changes first")
        shown.append(title)
        for h in gone:
            dropped.setdefault(h, []).append(title)
        if wide:
            piped(file=console.file, width=max(console.width, sum(w + 3 for _, w, _ in grid.columns) + 1),
                    force_terminal=console.is_terminal, no_color=console.no_color).print(grid)
        else:
            out(grid)
    floor = f"{ov['rel_floor'] * 100:g}% and {fmt_ns(ov['abs_floor_ns'])} per {unit}"
    out(f"[dim]n = count; Δ = B - A; Δ%/{unit}: change of the time per {unit}; p: {escape(ov['correction'])}-"
        f"adjusted, {escape(ov['test'])}; change: p < {ov['alpha']:g} and the change is at least {floor}[/]")
    if ranks > 1:
        out(f"[dim]A/{unit}, B/{unit}: per {unit} and rank, the mean over the {ranks} ranks (totals: their sum); "
            f"rank: the rank whose own test gave p, where one did, and rank Δ/{unit} its change per {unit}[/]")
    runs = max(ov["a"]["runs"], ov["b"]["runs"])
    if runs > 1:
        out("[dim]n, total: per run (the mean over a side's runs)[/]")
    if dropped:
        groups: dict[tuple[str, ...], list[str]] = {}  # the columns of the tables that left them out
        for h, where in dropped.items():
            groups.setdefault(() if len(where) == len(shown) else tuple(where), []).append(h)
        said = [", ".join(hs) + (f" in {' and '.join(w.split(' (')[0] for w in where)}" if where else "")
                for where, hs in groups.items()]
        out(f"[dim]Left out to fit {console.width} columns: {escape('; '.join(said))} (--wide shows them)[/]")
