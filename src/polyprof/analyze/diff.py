"""Diff of two runs: what got slower or faster, and whether it is beyond step-to-step noise.

Each side is one trace or several (the ranks of one run). Three tables, one row per
name (normalised, see ``analyze/names.py``, so the same work matches across runs):

* ``kernels``: device activity (kernels, copies, fills, collectives; their duration);
* ``ops``: framework ops (host duration, nested ops included, as in ``op_stats``);
* ``sections``: host sections and user annotations that are not steps (host duration).

Columns: ``name``, [``kind`` for kernels: compute / communication / memcpy / memset],
``count_a``, ``count_b``, ``delta_count``, ``total_ns_a``, ``total_ns_b``,
``delta_total_ns`` (B minus A), ``rel_change`` (``delta_total_ns / total_ns_a``; NaN when
A has none), ``step_mean_ns_a``, ``step_mean_ns_b`` (mean per-step total; NaN without
steps), ``p_value``, ``significant`` (None when the test cannot be made), ``change``
("slower", "faster" or ""), ``variants`` (distinct raw names merged into the row),
``raw_names``. Sorted by ``|delta_total_ns|``, largest first.

**The test.** A row's sample in a run is its total time in each step (on each rank):
device activity belongs to the step in which its launch call started, host events to
the step in which they started (as in ``step_stats``); steps come from the trace's
derived steps. The two runs' per-step totals are compared with a two-sided
Mann-Whitney U test (``analyze/ranktest.py``: exact for small samples, normal
approximation beyond); ``significant`` is ``p_value < alpha`` and ``change`` gives its
direction (of the per-step mean). When a run has no steps, or too few for the test to
reach ``alpha`` at all (3 vs 3 steps cannot: the smallest p-value is 0.1), the test
cannot be made: ``significant`` is None and the verdict says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from ..derive import cache
from ..derive.projection import section_rows
from ..errors import PolyprofError
from ..trace.categories import Kind
from ..trace.core import Trace
from .common import CLASS_NAMES, device_view, frame
from .names import normalize_name
from .ranktest import mann_whitney, min_p_value
from .window import WindowArg, host_mask, label, view
from ..trace import metadata_keys as mkeys

log = logging.getLogger(__name__)

TABLES = ("kernels", "ops", "sections")
LABELS = {"kernels": "kernel", "ops": "op", "sections": "section"}
ALPHA = 0.05
COLUMNS = ["name", "count_a", "count_b", "delta_count", "total_ns_a", "total_ns_b", "delta_total_ns",
           "rel_change", "step_mean_ns_a", "step_mean_ns_b", "p_value", "significant", "change",
           "variants", "raw_names"]


@dataclass
class Diff:
    """The tables, the step-time comparison and the verdict of :func:`diff`."""

    tables: dict[str, pd.DataFrame]
    step_time: dict[str, Any]
    verdict: list[str]
    changes: list[dict[str, Any]]  # the significant rows of every table, largest per-step change first
    overview: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(self.verdict)


@dataclass
class _Events:
    """One table's events in one trace: name ids, durations, step index (-1 outside)."""

    name: np.ndarray
    dur: np.ndarray
    step: np.ndarray
    kind: np.ndarray | None = None  # activity class (kernels only)


def diff(a: Any, b: Any, *, alpha: float = ALPHA, normalize: bool = True, top: int = 5,
         executor: Any = None, window: WindowArg = None) -> Diff:
    """Compare run ``a`` with run ``b``; each is a Trace, an iterable of Traces (ranks),
    or a ``polyprof.ranks.TraceSet``.

    Each trace is reduced to its per-name sums (:func:`summarize`) before the next is
    looked at: an iterable is consumed one trace at a time (a generator that loads each
    rank keeps one rank in memory), and a TraceSet's ranks are loaded and reduced where
    its ``map`` runs them, on ``executor`` (default: its process pool). ``normalize=False``
    matches raw names; ``top`` bounds the changes named per direction in the verdict.
    ``window`` chooses the steps of every trace (``analyze/window.py``; default all): e.g.
    ``Window(skip_first=1)`` leaves the warm-up step out of the totals and the test.
    See the module doc for the tables.
    """
    if not 0 < alpha < 1:
        raise PolyprofError(f"diff: alpha must be between 0 and 1, not {alpha!r}")
    acc = _Collector(normalize)
    for side, run in (("a", a), ("b", b)):
        for sums in _summaries(run, side, executor, window):
            acc.add(side, sums)
        if not acc.info[side]["traces"]:
            raise PolyprofError(f"diff: run {side.upper()} has no traces")
    n_a, n_b = len(acc.step_ns["a"]), len(acc.step_ns["b"])
    reason = _untestable(n_a, n_b, alpha)
    tables = {t: acc.table(t, alpha, reason is None) for t in TABLES}
    step_time = _step_time(acc, alpha, reason)
    changes = _changes(tables)
    overview = {"a": acc.info["a"], "b": acc.info["b"], "alpha": alpha, "normalized_names": normalize,
                "test": "two-sided Mann-Whitney U over per-step totals" +
                        (f" ({_method(n_a, n_b)}, {n_a} vs {n_b} steps)" if reason is None else ""),
                "untestable": reason}
    verdict = _verdict(tables, step_time, changes, reason, alpha, top)
    verdict += [f"Note: {w}." for s in ("a", "b") for w in acc.info[s].get("warnings", [])]
    return Diff(tables, step_time, verdict, changes, overview)


def _summaries(run: Any, side: str, executor: Any, window: WindowArg = None) -> Iterator[TraceSums]:
    """The per-trace sums of one run, in rank order for a TraceSet, else as given."""
    from functools import partial

    from ..ranks.traceset import TraceSet

    if isinstance(run, TraceSet):
        import sys

        done = run.map(partial(summarize, window=window), executor,
                       progress=f"run {side.upper()}" if sys.stderr.isatty() else None)
        yield from (done[r] for r in run.ranks)
        return
    if isinstance(run, Trace):
        run = [run]
    if isinstance(run, (str, bytes)) or not isinstance(run, Iterable):
        raise PolyprofError(f"diff: a run is a Trace, a sequence of Traces or a TraceSet, "
                            f"not a {type(run).__name__}")
    for i, trace in enumerate(run):
        if not isinstance(trace, Trace):
            raise PolyprofError(f"diff: run {side.upper()} item {i} is a {type(trace).__name__}, "
                                "not a polyprof Trace")
        yield summarize(trace, window)


def _untestable(n_a: int, n_b: int, alpha: float) -> str | None:
    """Why per-step totals cannot be tested at ``alpha``, or None."""
    if not n_a or not n_b:
        which = " and ".join(s for s, n in (("A", n_a), ("B", n_b)) if not n)
        return (f"run {which} {'have' if ' and ' in which else 'has'} no steps (the test compares per-step "
                "totals; record steps: torch.profiler's schedule, polyprof.step())")
    if min_p_value(n_a, n_b) >= alpha:
        return (f"too few steps ({n_a} vs {n_b}): the smallest p-value they allow is "
                f"{min_p_value(n_a, n_b):.3g}, not below alpha {alpha:g}")
    return None


def _method(n_a: int, n_b: int) -> str:
    import math

    from .ranktest import EXACT_LIMIT

    return "exact" if math.comb(n_a + n_b, n_a) <= EXACT_LIMIT else "normal approximation"


def _rank(trace: Trace) -> int | None:
    """The trace's rank: its one source's, else ``distributedInfo``'s, else None."""
    if len(trace.sources) == 1 and trace.sources[0].rank is not None:
        return int(trace.sources[0].rank)
    rank = trace.metadata.get(mkeys.RANK)
    return rank if isinstance(rank, int) else None


def _events(trace: Trace) -> dict[str, _Events]:
    """Kernels, ops and sections of one trace (those its window counts) with the step
    each belongs to."""
    ev = trace.events
    steps = cache.steps(trace)
    v = device_view(trace)
    c = v.counted
    launch_start = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)[c]
    out = {"kernels": _Events(ev["name"][v.rows[c]], (v.end - v.start)[c], steps.of(launch_start), v.cls[c])}
    for table, rows in (("ops", trace.rows_of_kind(Kind.CPU_OP)), ("sections", section_rows(trace))):
        rows = rows[host_mask(trace, ev["start_ns"][rows])]
        out[table] = _Events(ev["name"][rows], ev["dur_ns"][rows], steps.of(ev["start_ns"][rows]))
    return out


@dataclass
class TableSums:
    """One table of one trace: per distinct raw name, its count and total; per (name,
    step) with events, the total in that step."""

    names: list[str]
    kinds: np.ndarray  # activity class per name (kernels), -1 otherwise
    count: np.ndarray
    total: np.ndarray
    pair_name: np.ndarray  # index into names
    pair_step: np.ndarray  # step index in this trace
    pair_total: np.ndarray


@dataclass
class TraceSums:
    """What the diff keeps of one trace (small, picklable: made where the rank is loaded)."""

    rank: int | None
    sources: int
    events: int
    step_ns: np.ndarray  # duration of each step
    tables: dict[str, TableSums]
    window: str = ""  # the steps analysed, in words


def summarize(trace: Trace, window: WindowArg = None) -> TraceSums:
    """Per table and raw name of ``trace`` (of the steps ``window`` selects): counts,
    totals and per-step totals."""
    trace = view(trace, window)
    steps = cache.steps(trace)
    n_steps = max(len(steps), 1)
    tables = {}
    for table, e in _events(trace).items():
        ids, inv = np.unique(e.name, return_inverse=True)
        first = np.zeros(len(ids), np.int64)
        first[inv[::-1]] = np.arange(len(inv))[::-1]  # an event of each name, for its kind
        total = np.zeros(len(ids), np.int64)
        np.add.at(total, inv, e.dur)
        inside = e.step >= 0
        pair, pinv = np.unique(inv[inside].astype(np.int64) * n_steps + e.step[inside], return_inverse=True)
        psum = np.zeros(len(pair), np.int64)
        np.add.at(psum, pinv, e.dur[inside])
        tables[table] = TableSums(
            [trace.strings[i] for i in ids.tolist()],
            e.kind[first].astype(np.int64) if e.kind is not None else np.full(len(ids), -1, np.int64),
            np.bincount(inv, minlength=len(ids)).astype(np.int64), total, pair // n_steps, pair % n_steps, psum)
    return TraceSums(_rank(trace), len(trace.sources), trace.n_events,
                     (steps.end - steps.start).astype(np.int64), tables, label(trace, window))


class _Collector:
    """Per table: one vocabulary of (normalised) names for both runs, and per run the
    counts, totals and per-step totals of each name, added trace by trace."""

    def __init__(self, normalize: bool):
        self.normalize = normalize
        self.index: dict[str, dict[str, int]] = {t: {} for t in TABLES}
        self.raw: dict[str, list[set[str]]] = {t: [] for t in TABLES}
        self.kind: dict[str, list[int]] = {t: [] for t in TABLES}
        self.parts: dict[tuple[str, str], list[tuple[np.ndarray, ...]]] = {}
        self.step_ns: dict[str, list[int]] = {"a": [], "b": []}
        self.info = {s: {"traces": 0, "ranks": [], "events": 0, "steps": 0, "traces_without_steps": 0}
                     for s in ("a", "b")}

    def add(self, side: str, sums: TraceSums) -> None:
        info = self.info[side]
        info["ranks"].append(sums.rank if sums.rank is not None else info["traces"])
        if sums.sources > 1:
            note = (f"run {side.upper()} trace {info['traces']} holds {sums.sources} sources (merged ranks): "
                    "their steps merge by number into one sample each; pass the ranks as separate traces "
                    "for a sample per rank and step")
            log.warning("diff: %s", note)
            info.setdefault("warnings", []).append(note)
        info["traces"] += 1
        info.setdefault("window", sums.window)
        info["events"] += sums.events
        info["steps"] += len(sums.step_ns)
        info["traces_without_steps"] += int(not len(sums.step_ns))
        offset = len(self.step_ns[side])  # this trace's steps are samples offset.. of the run
        self.step_ns[side].extend(sums.step_ns.tolist())
        for table, t in sums.tables.items():
            g = self._keys(table, t)
            self.parts.setdefault((side, table), []).append(
                (g, t.count, t.total, g[t.pair_name], offset + t.pair_step, t.pair_total))

    def _keys(self, table: str, t: TableSums) -> np.ndarray:
        """Index in the table's vocabulary of each of ``t``'s raw names (normalised)."""
        index, raw, kinds = self.index[table], self.raw[table], self.kind[table]
        out = np.empty(len(t.names), np.int64)
        for i, name in enumerate(t.names):
            key = normalize_name(name) if self.normalize else name
            j = index.setdefault(key, len(index))
            if j == len(raw):
                raw.append(set())
                kinds.append(int(t.kinds[i]))
            raw[j].add(name)
            out[i] = j
        return out

    def _sums(self, side: str, table: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """count, total (per name) and the names x steps matrix of per-step totals."""
        count, total = np.zeros(n, np.int64), np.zeros(n, np.int64)
        per_step = np.zeros((n, len(self.step_ns[side])))
        for g, c, t, pk, ps, psum in self.parts.get((side, table), []):
            np.add.at(count, g, c)  # two raw names of one trace may normalise to one
            np.add.at(total, g, t)
            np.add.at(per_step, (pk, ps), psum)
        return count, total, per_step

    def table(self, table: str, alpha: float, testable: bool) -> pd.DataFrame:
        names = list(self.index[table])
        n = len(names)
        ca, ta, xa = self._sums("a", table, n)
        cb, tb, xb = self._sums("b", table, n)
        p = mann_whitney(xa, xb)[0] if n and xa.shape[1] and xb.shape[1] else np.full(n, np.nan)
        mean_a = xa.mean(axis=1) if xa.shape[1] else np.full(n, np.nan)
        mean_b = xb.mean(axis=1) if xb.shape[1] else np.full(n, np.nan)
        sig = p < alpha
        change = np.where(sig & (mean_b > mean_a), "slower", np.where(sig & (mean_b < mean_a), "faster", ""))
        raw = [sorted(r) for r in self.raw[table]]
        cols: dict[str, Any] = {"name": np.array(names, dtype=object)}
        if table == "kernels":
            cols["kind"] = CLASS_NAMES[np.array(self.kind[table], np.int64)] if n else np.zeros(0, object)
        delta = tb - ta
        cols.update({
            "count_a": ca, "count_b": cb, "delta_count": cb - ca, "total_ns_a": ta, "total_ns_b": tb,
            "delta_total_ns": delta, "rel_change": np.where(ta > 0, delta / np.maximum(ta, 1), np.nan),
            "step_mean_ns_a": mean_a, "step_mean_ns_b": mean_b, "p_value": p,
            "significant": pd.Series([bool(s) if testable else None for s in sig], dtype=object),
            "change": change.astype(object) if testable else np.full(n, "", dtype=object),
            "variants": np.array([len(r) for r in raw], np.int64),
            "raw_names": pd.Series(raw, dtype=object)})
        df = frame(cols)
        order = np.lexsort((np.array(names, dtype=object).astype(str) if n else np.zeros(0, str),
                            -np.abs(delta)))
        return df.take(order).reset_index(drop=True)


def _step_time(acc: _Collector, alpha: float, reason: str | None) -> dict[str, Any]:
    """Step durations of both runs compared with the same test."""
    a = np.asarray(acc.step_ns["a"], np.float64)
    b = np.asarray(acc.step_ns["b"], np.float64)
    p = float(mann_whitney(a[None, :], b[None, :])[0][0]) if len(a) and len(b) else float("nan")
    mean_a = float(a.mean()) if len(a) else float("nan")
    mean_b = float(b.mean()) if len(b) else float("nan")
    sig = None if reason else bool(p < alpha)
    return {"steps_a": len(a), "steps_b": len(b), "mean_ns_a": mean_a, "mean_ns_b": mean_b,
            "delta_ns": mean_b - mean_a, "rel_change": (mean_b - mean_a) / mean_a if mean_a > 0 else float("nan"),
            "p_value": p, "significant": sig,
            "change": ("slower" if mean_b > mean_a else "faster") if sig else ""}


def _changes(tables: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
    """Significant rows of every table, largest change of the per-step mean first."""
    ints = ("count_a", "count_b", "total_ns_a", "total_ns_b", "delta_total_ns")
    floats = ("step_mean_ns_a", "step_mean_ns_b", "p_value")
    out = []
    for t, df in tables.items():
        idx = np.flatnonzero(df["change"].to_numpy() != "")
        cols = {c: df[c].to_numpy()[idx].tolist() for c in ("name", "change", *ints, *floats)}
        for i in range(len(idx)):
            out.append({"table": t, **{c: v[i] for c, v in cols.items()}})
    out.sort(key=lambda c: (-abs(c["step_mean_ns_b"] - c["step_mean_ns_a"]), c["table"], c["name"]))
    return out


def _pct(x: float) -> str:
    return "new" if x != x or x == float("inf") else "gone" if x == -1 else f"{100 * x:+.1f}%"


def _item(c: dict[str, Any], short: int = 60) -> str:
    from ..report.terminal import fmt_ns

    name = c["name"] if len(c["name"]) <= short else c["name"][: short - 1] + "…"
    a, b = c["step_mean_ns_a"], c["step_mean_ns_b"]
    rel = (b - a) / a if a > 0 else float("nan")
    return f"{LABELS[c['table']]} {name} {fmt_ns(a)} -> {fmt_ns(b)} per step ({_pct(rel)}, p={c['p_value']:.2g})"


def _verdict(tables: dict[str, pd.DataFrame], st: dict[str, Any], changes: list[dict[str, Any]],
             reason: str | None, alpha: float, top: int) -> list[str]:
    """A few lines: step time, what got slower, what got faster, what did not change."""
    from ..report.terminal import fmt_ns

    lines = []
    if st["steps_a"] and st["steps_b"]:
        what = {"slower": "B is slower", "faster": "B is faster", "": "no significant change"}[st["change"]] \
            if reason is None else "not tested"
        lines.append(f"Step time: {fmt_ns(st['mean_ns_a'])} -> {fmt_ns(st['mean_ns_b'])} per step "
                     f"({_pct(st['rel_change'])}, p={st['p_value']:.2g}; {st['steps_a']} vs {st['steps_b']} "
                     f"steps): {what}.")
    if reason is not None:
        lines.append(f"No change is called significant: {reason}.")
        rows = [(t, r) for t, df in tables.items() for r in df.head(top).itertuples(index=False)]
        rows.sort(key=lambda x: -abs(x[1].delta_total_ns))
        if rows:
            lines.append("Largest differences in total time (not tested): " + "; ".join(
                f"{LABELS[t]} {r.name[:60]} {fmt_ns(r.total_ns_a)} -> {fmt_ns(r.total_ns_b)} ({_pct(r.rel_change)})"
                for t, r in rows[:top]) + ".")
        return lines
    for direction in ("slower", "faster"):
        sel = [c for c in changes if c["change"] == direction]
        if sel:
            more = f" (and {len(sel) - top} more)" if len(sel) > top else ""
            lines.append(f"{direction.capitalize()} in B ({len(sel)}): " +
                         "; ".join(_item(c) for c in sel[:top]) + more + ".")
    total = sum(len(df) for df in tables.values())
    lines.append(f"Within step-to-step noise: {total - len(changes)} of {total} kernels, ops and sections "
                 f"(Mann-Whitney U over per-step totals, alpha {alpha:g}).")
    return lines
