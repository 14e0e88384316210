"""polyprof critical-path: what holds each step of a job (its ranks joined through their
matched collectives), and what-ifs on it (ranks/critical_path.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import logs
from ..errors import PolyprofError
from .common import Subparsers, add_window_args, count, window_from
from .ranks import add_rank_by_arg
from ..trace.sorting import unique

log = logs.kept("polyprof")


#: what ``polyprof critical-path --help`` ends with
EXAMPLES = [
    ("polyprof critical-path logs/", "per step: the path's length, its ranks and ops, across the job's ranks"),
    ("polyprof critical-path logs/ --what-if 3:nccl:0.5",
     "each step's change if rank 3's ops whose name holds nccl took half as long"),
    ("polyprof critical-path train.polyprof --step 2 -n 20", "one trace's third step, 20 events of its path"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "critical-path", examples=EXAMPLES, help="what holds each step across the ranks of a job, and what-ifs",
        description="The critical path of each step of a job: every rank's dependency graph (HTA's) joined "
                    "through the matched collectives (the k-th collective of a communicator ends when its last "
                    "rank arrives; a rank none of whose collectives matches is named, and left out), on the "
                    "aligned clock. Prints per step the path's length, the rank and the "
                    "ops on it; --what-if RANK:NAME:FACTOR predicts each step's change if that rank's ops whose "
                    "name holds NAME took FACTOR times as long (0.8: 20% faster; all of each one's own time on "
                    "the path, a section's before its ops too). One trace file is a job of "
                    "one rank, and its path is the one of summary's critical_path table (the same graph: HTA's, "
                    "plus each stream's order across gaps of 1.5 ms or more). Each step's line also gives the "
                    "step's wall time with its device work (its start to the last end of its calls and of the "
                    "device activity they launched), which the path never exceeds. Each rank's steps are the ones "
                    "summary analyses (by default every step but the first, the warm-up, when there are 3 or "
                    "more; a schedule's recorded steps; a time window). Every rank is held in memory.")
    p.add_argument("file", nargs="+", help="the ranks' trace files, a directory of them, or a store")
    p.add_argument("--step", type=int, action="append", metavar="K",
                   help="the K-th step (by position among the trace's steps, from 0) of every rank, one of "
                        "those analysed; repeat for more (default: every analysed step)")
    p.add_argument("--what-if", action="append", default=[], metavar="RANK:NAME:FACTOR",
                   help="predicted change of each step if rank RANK's ops, calls, sections and kernels whose name holds "
                        "NAME (case-insensitive) took FACTOR times as long; repeatable")
    p.add_argument("-n", "--top", type=count, default=10, help="events listed per step (default 10; --json: all)")
    p.add_argument("--no-align", action="store_true",
                   help="take the ranks' clocks as they are (default: aligned from their collectives)")
    p.add_argument("--json", action="store_true", help="print the path, the what-ifs and the clocks as JSON")
    add_window_args(p)
    add_rank_by_arg(p)
    p.set_defaults(func=run)


def _what_ifs(specs: list[str]) -> list[tuple[int, str, float]]:
    out = []
    for s in specs:
        parts = s.rsplit(":", 1)
        head = parts[0].split(":", 1) if len(parts) == 2 else []
        try:
            if len(head) != 2 or not head[1]:
                raise ValueError
            factor = float(parts[1])
            if not 0 <= factor < float("inf"):
                raise ValueError
            out.append((int(head[0]), head[1], factor))
        except ValueError:
            raise PolyprofError(f"--what-if {s!r}: expected RANK:NAME:FACTOR, FACTOR 0 or more, e.g. 3:all_gather:0.8") from None
    return out


def _traces(files: list[str], window: Any, rank_by: str = "auto") -> dict[int, Any]:
    """Every rank as the summary analyses it: the steps ``window`` selects on each rank
    (``analyze.window.view``, as ``rank_summary`` does for a job's summary); ranks
    numbered as ``rank_by`` says (``--rank-by``)."""
    from ..analyze.critical_path import rank_of
    from ..analyze.window import view
    from .common import load_trace
    from .ranks import is_job

    if not is_job(files):
        t = load_trace(files[0])
        return {rank_of(t): view(t, window)}
    from ..ranks.traceset import load_ranks

    ts = load_ranks(files if len(files) > 1 else files[0], rank_by=rank_by)
    out = {r: view(t, window) for r, t in ts.traces()}
    _say_missing(out)
    return out


def _say_missing(traces: dict[int, Any]) -> None:
    """A warning where the traces name ranks of their job that were not given, as the
    job's summary says (ranks/missing.py): a wait on the path may be for one of them
    (before, a 3-of-4-rank job's path put 33.7 ms of waiting for the absent rank on a
    collective of rank 1, without a word)."""
    from ..analyze.units import number_ranges
    from ..ranks.missing import missing_ranks, not_given
    from ..ranks.result import stated_job

    missing, world = missing_ranks({r: stated_job(t.metadata) for r, t in traces.items()})
    if missing or world:
        gone, size = not_given(len(traces), missing, world)
        log.warning("the traces name a job of %d ranks; %s not given (found: ranks %s): a wait in a collective on "
                    "the path may be for %s", size, gone, number_ranges(sorted(traces)), gone)


def _positions(trace: Any, total: int) -> Any:
    """Per analysed step of ``trace`` (a window's view), its position among the trace's
    steps (``Selection.index``): what --step and the output call it; 0 for a time window
    holding no whole step, analysed as one."""
    import numpy as np

    from ..analyze.window import selection
    from ..derive import cache

    sel = selection(trace)
    if sel is None or not len(cache.steps(trace)):
        return np.arange(total, dtype=np.int64)
    return np.asarray(sel.index, np.int64)[:total]


def _bad_step(k: int, pos: Any, trace: Any) -> PolyprofError:
    from ..analyze.window import label, selection

    if selection(trace) is None:
        return PolyprofError(f"--step {k}: the ranks have {len(pos)} step(s) in common (0 to {len(pos) - 1})")
    shown = ", ".join(map(str, pos[:8].tolist())) + (", ..." if len(pos) > 8 else "")
    return PolyprofError(f"--step {k}: not among the analysed steps (positions {shown or 'none'}: "
                         f"{label(trace)}; --all-steps, --steps or --skip-first choose others)")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..analyze.longest_path import longest_path
    from ..ranks import critical_path as jcp
    from ..ranks.what_if import what_if_op

    asks = _what_ifs(args.what_if)
    from .memory_check import check_memory  # (light: imports fits only where the inputs do not clearly fit)

    check_memory("critical-path", args.file)
    traces = _traces(args.file, window_from(args), args.rank_by)
    for r, _, _ in asks:
        if r not in traces:
            raise PolyprofError(f"--what-if: no rank {r} (ranks: {sorted(traces)})")
    clocks = None if args.no_align or len(traces) < 2 else jcp.align(traces)
    # the analysed steps every rank has (their positions in the first rank's view: j), named
    # by their positions among the first rank's steps (K), as before any window
    first = traces[min(traces)]
    pos = _positions(first, jcp.n_steps(traces))
    index = {int(k): j for j, k in enumerate(pos.tolist())}
    steps = pos.tolist() if not args.step else args.step
    bad = [k for k in steps if k not in index]
    if bad:
        raise _bad_step(bad[0], pos, first)
    table = jcp.job_critical_path(traces, [index[k] for k in steps], clocks)
    table = table.with_columns(step=pos[np.asarray(table["step"], np.int64)])
    predicted = []
    unjoined = []  # the ranks each step joined to no other
    waits: list[dict[str, Any]] = []  # the path's time no event owns: launch delays, gaps, waits
    for k in steps:
        jg = jcp.job_graph(traces, index[k], clocks)
        unjoined += [{"step": k, "rank": r, "why": why, "in_graph": r not in jg.left_out}
                     for r, why in sorted(jg.unjoined.items())]
        path = longest_path(jg.graph)
        waits += _waits(jg, path, k)
        base = path.length
        for r, name, factor in asks:
            delta, n = what_if_op(jg, r, name, factor)
            predicted.append({"step": k, "rank": r, "name": name, "factor": factor, "events": n,
                              "path_ns": base, "change_ns": delta})
    for r, name, factor in asks:  # (a typo in the name read as "0 events: step 0 ns", step after step)
        if not any(p["events"] for p in predicted if (p["rank"], p["name"]) == (r, name)):
            log.warning("--what-if %d:%s:%g: no event of rank %d in the analysed steps has a name holding %r "
                        "(case-insensitive): its predictions change nothing", r, name, factor, r, name)
    if args.json:
        rows = [{c: (v.item() if isinstance(v, np.generic) else v) for c, v in zip(table.columns, vals)}
                for vals in zip(*(table[c].tolist() for c in table.columns))]
        clock_rows = [{"rank": r, "offset_ns": int(c.fit.offset_ns), "aligned": bool(c.aligned)}
                      for r, c in sorted((clocks or {}).items())]
        sys.stdout.write(json.dumps({"critical_path": rows, "what_if": predicted, "clocks": clock_rows,
                                     "unjoined": unjoined, "waits": waits}) + "\n")
        return 0
    from ..analyze.critical_path import step_windows

    numbers = np.zeros(int(pos.max()) + 1 if len(pos) else 0, np.int64)
    numbers[pos] = step_windows(first)[0][:len(pos)]  # the first rank's step numbers, as the other commands show
    _print(table, predicted, steps, args.top, numbers, traces, unjoined, index, waits)
    return 0


def _waits(jg: Any, path: Any, step: int) -> list[dict[str, Any]]:
    """Step ``step``'s path time that no event owns (``analyze.critical_path.path_waits``),
    per kind: its ns, and its longest edge's ns, rank and the events at its two ends."""
    import numpy as np

    from ..analyze.critical_path import WAIT_WORDS, path_waits

    g = jg.graph
    out = []
    for kind, ns, e in path_waits(g, path):
        ends = [int(g.src[e]) >> 1, int(g.dst[e]) >> 1]
        t = jg.traces[jg.ranks.index(int(jg.rank[ends[0]]))]
        names = [str(n) for n in t.names(np.asarray(g.rows[ends], np.int64))]
        out.append({"step": step, "kind": WAIT_WORDS[kind], "ns": ns, "longest_ns": int(g.weight[e]),
                    "rank": int(jg.rank[ends[0]]), "from": names[0], "to": names[1]})
    return out


def _unjoined_lines(notes: list[dict[str, Any]], every: bool, width: int) -> list[str]:
    """The ranks a step joined to no other (``every``: the same in every step), one line
    per reason: why, and whether the rank's graph is in the job's (ranks/critical_path.py:
    ``job_graph``'s ``unjoined`` and ``left_out``)."""
    import textwrap

    from ..ranks.critical_path import ALONE, LEFT_OUT  # the wording the export track's stat has too

    by: dict[tuple[str, bool], list[int]] = {}
    for x in notes:
        by.setdefault((x["why"], x["in_graph"]), []).append(int(x["rank"]))
    out = []
    for (why, kept), ranks in by.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
        when = " in any step" if every else ""
        out.append(textwrap.fill(f"not joined{when}: {who}: {why}; {ALONE if kept else LEFT_OUT}", width,
                                 initial_indent="" if every else "  ", subsequent_indent="    ",
                                 break_long_words=False, break_on_hyphens=False))
    return out


#: the other ranks a step's header names beside the one holding most of the path
OTHER_RANKS = 3


def _width() -> int:
    """The terminal's width as the summary takes it (COLUMNS, else the terminal's, else 80)."""
    from ..report.textout import plain_terminal  # the summary's width rule, only for the text output

    term = plain_terminal(sys.stdout)
    return max(term.width if term else 80, 40)


def _shares(share: dict[int, int], length: int) -> tuple[int, str]:
    """The rank holding most of the path, and the others' shares as text: the largest
    :data:`OTHER_RANKS` that round to 1% or more, the rest counted (0% ones left out)."""
    held = max(share, key=lambda r: (share[r], -r))
    pct = {r: 100.0 * v / max(length, 1) for r, v in share.items() if r != held and v > 0}
    order = sorted(pct, key=lambda r: (-pct[r], r))
    named = [r for r in order[:OTHER_RANKS] if pct[r] >= 0.5]
    rest = [r for r in order if r not in named]
    words = [f"rank {r} {pct[r]:.0f}%" for r in named]
    if rest:
        n = f"+{len(rest)} rank{'s' if len(rest) > 1 else ''}"
        words.append(f"{n} under 1%" if max(pct[r] for r in rest) < 1 else
                     f"{n} {sum(pct[r] for r in rest):.0f}% together")
    return held, ", ".join(words)


def _no_path(traces: dict[int, Any], k: int, where: str) -> str:
    """Why step ``k`` (``where``: "the step", or "the trace" without steps) has no
    critical path: the path follows host ops, runtime calls and the device activity they
    launch; what the ranks have in the step instead."""
    import numpy as np

    from ..analyze.critical_path import _KIND_TEXT, step_windows  # the kind column's words

    counts: dict[str, int] = {}
    for t in traces.values():
        _, starts, ends = step_windows(t)
        if k >= len(starts) or not t.n_events:
            continue
        start = np.asarray(t.events["start_ns"], np.int64)
        kinds = np.asarray(t.kinds, np.int64)[(start >= starts[k]) & (start <= ends[k])]
        for code, n in zip(*np.unique(kinds, return_counts=True)):
            counts[str(_KIND_TEXT[code])] = counts.get(str(_KIND_TEXT[code]), 0) + int(n)
    follows = "the path follows framework ops, runtime calls and the device work they launch"
    if not counts:
        return f"no critical path ({follows}): {where} has no events"
    what = ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    if counts.keys() & _FOLLOWED:  # (the kinds are there: what joins them is not)
        return (f"no critical path ({follows}): {where} has {what} events, but no chain of them: its host work is "
                "on no host thread, or its launches match none of its device activity (polyprof summary's "
                "correlation line says which)")
    return f"no critical path ({follows}): {where} has none of them, only {what} events"


#: the kinds (``_KIND_TEXT``) a critical path is made of
_FOLLOWED = frozenset(("cpu_op", "runtime", "kernel", "memcpy", "memset"))


def _print(table: Any, predicted: list[dict[str, Any]], steps: list[int], top: int, numbers: Any,
           traces: dict[int, Any] | None = None, unjoined: list[dict[str, Any]] | None = None,
           index: dict[int, int] | None = None, waits: list[dict[str, Any]] | None = None) -> None:
    """Per step (``steps``: positions among the first rank's steps, ``numbers`` their
    numbers; ``index``: each one's position among the analysed steps of ``traces``) its
    path, as the summary's line says it."""
    import textwrap

    import numpy as np

    from ..analyze.units import fmt_ns  # the summary's duration rule, only for the text output
    from ..analyze.window import selection
    from ..report.path_text import STEP_SPAN, WHOLE_SPAN  # the summary line's words for the span

    width = _width()
    sel = selection(traces[min(traces)]) if traces else None
    trace_words = "the analysed span" if sel is not None and sel.timed else "the trace"
    step = np.asarray(table["step"], np.int64)
    notes: dict[int, list[dict[str, Any]]] = {k: [] for k in steps}
    for x in unjoined or []:
        notes[x["step"]].append({c: v for c, v in x.items() if c != "step"})
    every = len(steps) > 1 and all(notes[k] == notes[steps[0]] for k in steps) and bool(notes[steps[0]])
    if every:  # (once, not per step)
        print("\n".join(_unjoined_lines(notes[steps[0]], True, width)))
    for k in steps:
        lines = [] if every else _unjoined_lines(notes[k], False, width)
        m = np.flatnonzero(step == k)
        whole = k < len(numbers) and int(numbers[k]) < 0  # no steps: the whole trace, as summary says
        said = "" if whole else f"step {k}" + (f" (#{int(numbers[k])})" if k < len(numbers) else "") + ": "
        where = trace_words if whole else "the step"
        if not len(m):
            j = k if index is None else index[k]
            print(textwrap.fill(f"{said}{_no_path(traces or {}, j, where)}", width, subsequent_indent="  "))
            if lines:
                print("\n".join(lines))
            continue
        length = int(table["path_ns"][m[0]])
        span = int(table["span_ns"][m[0]])
        on = np.asarray(table["on_path_ns"], np.int64)[m]
        ranks = np.asarray(table["rank"], np.int64)[m]
        share = {int(r): int(on[ranks == r].sum()) for r in unique(ranks)}
        held, others = _shares(share, length)
        words = WHOLE_SPAN if where == "the trace" else STEP_SPAN  # (which span: the summary's words)
        n_ranks = len(traces) if traces else len(share)  # (one rank: the whole path is its, waits too)
        holds = "" if n_ranks < 2 else (f"; rank {held} holds {100.0 * share[held] / max(length, 1):.0f}% "
                                                 "of it" + (f" ({others})" if others else ""))
        print(textwrap.fill(f"{said}critical path {fmt_ns(length)} of {where}'s {fmt_ns(span)} ({words}){holds}",
                            width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False))
        if lines:
            print("\n".join(lines))
        keys: dict[tuple[int, str, str], int] = {}
        for r, n, kind, v in zip(ranks.tolist(), table["name"][m].tolist(), table["kind"][m].tolist(), on.tolist()):
            keys[(r, n, kind)] = keys.get((r, n, kind), 0) + v
        listed = sorted(keys.items(), key=lambda x: -x[1])
        _print_rows(listed[:top], width)
        rest = listed[top:]
        if rest:  # (so that the rows, these and the waits add up to the path)
            print(f"  (+{len(rest)} more, {fmt_ns(sum(v for _, v in rest))} on the path)")
        mine = [w for w in waits or [] if w["step"] == k]
        if mine:
            print("\n".join(_wait_lines(mine, length, n_ranks > 1, width)))
        for w in (x for x in predicted if x["step"] == k):
            change = int(w["change_ns"])
            print(f"  what-if: rank {w['rank']}'s {w['name']!r} x{w['factor']:g} ({w['events']} event{'' if w['events'] == 1 else 's'}): "
                  f"{where.removeprefix('the ')} {'+' if change > 0 else ''}{fmt_ns(change)}")


def _wait_lines(waits: list[dict[str, Any]], length: int, ranks: bool, width: int) -> list[str]:
    """The path's time in no event (``waits``, of one step, most first) as one line: its
    total and share of the path, each kind's time and the longest edge of the largest."""
    import textwrap

    from ..analyze.units import fmt_ns  # the summary's duration rule, only for the text output
    from ..report.names import fit_names  # the summary's name rule, only for the text output

    total = sum(w["ns"] for w in waits)
    kinds = ", ".join(f"{w['kind']} {fmt_ns(w['ns'])}" for w in waits)
    big = waits[0]
    a, b = fit_names([big["from"], big["to"]], max(24, (width - 60) // 2))  # (wider terminals: more of each)
    who = f"rank {big['rank']}'s " if ranks else ""
    text = (f"in no event: {fmt_ns(total)} ({100.0 * total / max(length, 1):.1f}% of the path): {kinds}; "
            f"the longest {fmt_ns(big['longest_ns'])}, {who}{a} -> {b}")
    return textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def _print_rows(rows: list[tuple[tuple[int, str, str], int]], width: int) -> None:
    """The on-path events of a step, one line each within ``width``: the names shortened
    by what their parts mean and then cut where they differ, as the summary's tables do
    (report/names.py; ``--json`` keeps them whole)."""
    from ..analyze.units import fmt_ns  # the summary's duration rule, only for the text output
    from ..report.names import fit_names  # the summary's name rule, only for the text output

    kw = max([10] + [len(kind) for (_, _, kind), _ in rows])
    rw = max([4] + [len(str(r)) for (r, _, _), _ in rows])
    room = max(width - (2 + rw + 2 + kw + 1 + 8 + 2), 12)
    names = fit_names([n for (_, n, _), _ in rows], room)
    print(f"  {'rank':>{rw}}  {'kind':<{kw}} {'on path':>8}  name")
    for ((r, _, kind), v), name in zip(rows, names):
        print(f"  {r:>{rw}}  {kind:<{kw}} {fmt_ns(v):>8}  {name}")
