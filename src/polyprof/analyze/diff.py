"""Diff of two runs: what got slower or faster, beyond the noise and above a floor.

Each side is one run (a trace, or the traces of its ranks) or several runs of the same
program (replicates, :class:`Runs`). Three tables, one row per name (normalised, see
``analyze/names.py``, and renames that keep their role merged, ``analyze/roles.py``):

* ``kernels``: device activity (kernels, copies, fills, collectives; their duration);
* ``ops``: framework ops (host duration, nested ops included, an op that is the only
  child of an op of its name merged into it, as in ``op_stats``);
* ``sections``: host sections and user annotations that are not steps (host duration).

Columns: ``name``, [for kernels: ``kind`` (compute / communication / memcpy / memset),
``module`` (an XLA op's module, "" where the trace gives none) and ``kernel`` (the name
alone): an op of a known module is a row ``module/op``, its ``.N`` kept, since XLA names
ops uniquely within a module only (docs/analysis.md)],
``count_a``, ``count_b``, ``delta_count``, ``total_ns_a``, ``total_ns_b``,
``delta_total_ns`` (B minus A; per run: the mean over a side's runs, summed over its
ranks), ``step_mean_ns_a``, ``step_mean_ns_b`` (mean total per step and rank: each
rank's mean per step, averaged over the ranks, so that with as many steps on each side
they are the totals over steps and ranks and move with them), ``step_median_ns_a``,
``step_median_ns_b`` (the typical step's total: each run's median step, averaged as the
means), ``step_delta_ns`` and ``rel_change`` (its change, in ns and relative to A; NaN when A has none per step and B
some; 0 when neither has any),
``p_value`` (the row's test), ``p_adjusted`` (Holm, across the rows tested),
``significant`` (None when nothing could be tested), ``change`` ("slower", "faster" or
""), ``reason`` (why a row is not called changed), ``rank_decided`` (the rank whose own
test gave the row's p-value: the rank that moved most in the direction of the mean;
-1 when the ranks combined did, or there is one), ``rank_step_mean_ns_a``,
``rank_step_mean_ns_b``, ``rank_step_delta_ns`` (that rank's mean per step and its
change; NaN when -1), ``steady_calls``
(every step of each side calls it the same number of times), ``variants``,
``raw_names``. Significant rows come
first (largest per-step change first), then the others by size (the larger of
``total_ns_a`` and ``total_ns_b``), then by name.

A row is called changed when all three hold (docs/analysis.md, "Diff of two runs"):
its adjusted p-value is below ``alpha`` (the test: ``analyze/diff_stats.py``); its
per-step change is at least ``rel_floor`` of A's (default 5%); and at least
``abs_floor_ns`` per step (default 20 µs); the change of the rank that decided the row,
when one did, else of the mean over the ranks; the floors hold for the change of its
typical (median) step too, the same way, as the step time's are on its median step (one
stalled step moves a mean). Rows whose every per-step total, in both
runs, is below the absolute floor cannot reach it and are not tested (nor counted in
the correction): a label-blind filter, so the correction stays valid. A table one side
has nothing in, recorded otherwise, or every table where the sides share no row, is not
compared (``diff_sides.not_compared``: the rows' ``reason`` says so).

The samples are steps; a trace without steps is left out where both sides have traces
with steps (``overview[side]["left_out"]`` names it), and each trace is one sample only
where a side has none (``_Collector.settle``; the verdict's notes: ``diff_notes.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

import numpy as np

from .. import logs
from ..errors import PolyprofError
from .common import CLASS_NAMES
from .diff_stats import (NO_REACH, TESTS, Compared, Samples, SparseSamples, adjust, change_of, compare, decide,
                         typical_change, without_stalls)
from .diff_nesting import NestCounts, changes_of
from .diff_sums import TableSums, TraceSums, is_job, run_summaries
from .diff_apart import ranks_apart
from .diff_notes import reach, sample_notes
from .diff_sides import lines as side_lines, not_compared, ranks_as_runs, side_info
from .diff_verdict import APART, STALL, sign_notes, test_way, verdict_lines
from .frames import column, frame
from .names import normalize_name, normalize_op_name
from .ranktest import CORRECTIONS
from .roles import role_name
from .table import Table
from .units import fmt_ns
from .window import AUTO, WindowArg

log = logs.kept(__name__)

TABLES = ("kernels", "ops", "sections")
ALPHA = 0.05
#: a change smaller than this share of A's per-step time is not called a change
REL_FLOOR = 0.05
#: nor one smaller than this, in ns per step
ABS_FLOOR_NS = 20_000
CORRECTION = "holm"
#: rows whose per-step distributions a Diff keeps (for charts), at most
KEEP_SAMPLES = 12
COLUMNS = ["name", "count_a", "count_b", "delta_count", "total_ns_a", "total_ns_b", "delta_total_ns",
           "step_mean_ns_a", "step_mean_ns_b", "step_median_ns_a", "step_median_ns_b", "step_delta_ns", "rel_change",
           "p_value", "p_adjusted", "significant", "change", "reason", "rank_decided", "rank_step_mean_ns_a",
           "rank_step_mean_ns_b", "rank_step_delta_ns", "steady_calls", "variants", "raw_names"]


class Runs(tuple):
    """Several runs of one side (replicates): ``diff(Runs([a1, a2]), Runs([b1, b2]))``.
    Each item is a run: a Trace, a sequence of Traces (its ranks) or a TraceSet."""


@dataclass
class Diff:
    """The tables, the step-time comparison and the verdict of :func:`diff`."""

    tables: dict[str, Table]
    step_time: dict[str, Any]
    verdict: list[str]
    changes: list[dict[str, Any]]  # the significant rows of every table, largest per-step change first
    overview: dict[str, Any] = field(default_factory=dict)
    #: per-step totals of the step time and of the top rows (significant first): table
    #: ("steps" for the step time), name, and per side the samples with their run and rank
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.verdict)

    @property
    def changed(self) -> bool:
        """Whether any row or the step time is called changed."""
        return bool(self.changes) or bool(self.step_time.get("change"))


def diff(a: Any, b: Any, *, alpha: float = ALPHA, normalize: bool = True, top: int = 5,
         executor: Any = None, window: WindowArg = AUTO, rel_floor: float = REL_FLOOR,
         abs_floor_ns: float = ABS_FLOOR_NS, correction: str = CORRECTION, test: str = "t") -> Diff:
    """Compare run ``a`` with run ``b``. Each side is a run — a Trace, a sequence of
    Traces (its ranks) or a ``polyprof.ranks.TraceSet`` — or several runs of the same
    program: a :class:`Runs`, or a list whose items are sequences or TraceSets.

    Each trace is reduced to its per-name sums (:func:`diff_sums.summarize`) before the next is
    looked at: a sequence is consumed one trace at a time, and a TraceSet's ranks are
    loaded and reduced where its ``map`` runs them, on ``executor`` (default: its
    process pool). ``window`` chooses the steps of every trace (``analyze/window.py``);
    the default is ``summary``'s (AUTO: the first step, the warm-up, left out of traces
    with 3 or more). ``normalize=False`` matches raw names (no normalisation, no role
    rules). ``rel_floor`` and ``abs_floor_ns`` are the smallest change called a change;
    ``correction`` is "holm" (default) or "bh"; ``test`` is "t" (default) or "rank".
    ``top`` bounds the changes named per direction in the verdict. See the module doc.
    """
    if not 0 < alpha < 1:
        raise PolyprofError(f"diff: alpha must be between 0 and 1, not {alpha!r}")
    if not (rel_floor >= 0 and abs_floor_ns >= 0):
        raise PolyprofError(f"diff: the effect floors must be 0 or more, not {rel_floor!r} and {abs_floor_ns!r}")
    if correction not in CORRECTIONS:
        raise PolyprofError(f"diff: correction must be one of {', '.join(CORRECTIONS)}, not {correction!r}")
    if test not in TESTS:
        raise PolyprofError(f"diff: test must be one of {', '.join(TESTS)}, not {test!r}")
    acc = _Collector(normalize)
    sides = {"a": _runs(a), "b": _runs(b)}
    for side, runs in sides.items():
        if all(is_job(r) for r in runs):  # (Traces in memory: which job's ranks they are is not known)
            ranks_as_runs(side, [r.entries for r in runs])  # (before any is read)
    for side, runs in sides.items():
        for run_no, run in enumerate(runs):
            for rank, sums in run_summaries(run, side, executor, window):
                acc.add(side, run_no, rank, sums)
        if not acc.info[side]["traces"]:
            raise PolyprofError(f"diff: run {side.upper()} has no traces")
    whole = acc.settle()  # per step, traces without steps left out, unless a side has no steps at all
    one_rank = acc.one_trace_per_run()  # then the rank numbers do not matter: rank 0 of A against rank 1 of B
    compared = {t: compare(acc.samples("a", t, whole), acc.samples("b", t, whole), test) for t in TABLES}
    floors = (rel_floor, abs_floor_ns)
    counts = {t: (acc.sums("a", t)[0], acc.sums("b", t)[0]) for t in TABLES}
    recorded = {s: acc.info[s].get("recorded", []) for s in ("a", "b")}
    apart = not_compared(counts, recorded)  # one side's empty table, or no row in common: not compared (diff_sides)
    tested = {t: _testable(acc, t, whole, compared[t], abs_floor_ns) & (t not in apart) for t in TABLES}
    adjusted = adjust({t: np.where(tested[t], compared[t].p, np.nan) for t in TABLES}, correction)
    untestable = next((c.untestable for c in compared.values() if c.untestable), None)
    if untestable is not None and whole:
        which = [s.upper() for s in ("a", "b") if acc.info[s]["traces_without_steps"] == acc.info[s]["traces"]]
        untestable = (f"run {' and '.join(which)} {'have' if len(which) > 1 else 'has'} no steps and one run "
                      "a side (the test compares per-step totals, or runs: record steps with torch.profiler's "
                      "schedule or polyprof.step(), or give several runs a side)")
    n_tested = int(sum(int(tested[t].sum()) for t in TABLES))
    out_of_reach = reach(compared, n_tested, alpha, correction, test)  # (None: a row can be called)
    tables = {t: acc.table(t, compared[t], tested[t], adjusted[t], alpha, floors, untestable is None,
                           out_of_reach is not None, apart.get(t)) for t in TABLES}
    step_time = _step_time(acc, whole, alpha, floors, test)
    changes = changes_of(tables, acc.nest)  # nested rows that moved together: one change (diff_nesting)
    strata = compared["kernels"].strata
    method = compared["kernels"].method or compared["ops"].method
    overview = {"a": acc.info["a"], "b": acc.info["b"], "alpha": alpha, "normalized_names": normalize,
                "test": method, "correction": correction, "rows_tested": n_tested,
                "rel_floor": rel_floor, "abs_floor_ns": abs_floor_ns, "ranks": strata,
                "samples": "whole traces (a trace without steps)" if whole else "steps",
                "untestable": untestable, "reach": out_of_reach, "not_compared": apart}
    verdict = verdict_lines(tables, step_time, changes, overview, top, fmt_ns, acc.nest,  # (its lists grouped too)
                            side_lines(counts, apart, recorded))
    if len(strata) > 1:  # a collective the ranks moved apart in (after the changes)
        moved = ranks_apart({t: (list(acc.index[t]), compared[t].means_a, compared[t].means_b) for t in TABLES
                             if t not in apart}, strata, tables, step_time, floors, fmt_ns, unit=step_time["unit"])
        at = next((i for i, line in enumerate(verdict) if line.startswith(("Unchanged:", "Not called changed"))),
                  len(verdict))
        verdict[at:at] = moved
    verdict += sign_notes(tables, overview)  # totals against per step, one rank or many
    verdict += sample_notes(overview)  # traces without steps: left out, or why the diff is per trace
    verdict += [f"Note: {w}." for s in ("a", "b") for w in acc.info[s].get("warnings", [])]
    alone = {s: [] if one_rank else sorted(set(acc.info[s]["ranks"]) - set(acc.info[o]["ranks"]))
             for s, o in (("a", "b"), ("b", "a"))}
    overview["ranks_not_tested"] = alone
    if alone["a"] or alone["b"]:
        where = "; ".join(f"only in {s.upper()}: {', '.join(map(str, r))}" for s, r in alone.items() if r)
        verdict.append(f"Note: ranks are matched by number, and some are in one run only ({where}): their time is "
                       "in the totals, not in the tests.")
    d = Diff(tables, step_time, verdict, changes, overview)
    d.samples = _keep_samples(acc, tables, whole)
    return d


def _runs(side: Any) -> list[Any]:
    """The runs of one side: a Runs' items, a list of sequences / TraceSets, else one run."""
    if isinstance(side, Runs):
        return list(side)
    if isinstance(side, (list, tuple)) and side and all(
            isinstance(r, (list, tuple)) or is_job(r) for r in side):
        return list(side)
    return [side]


class _Part(NamedTuple):
    """One trace's table as a side's collector keeps it: per raw name its index in the
    table's vocabulary (``key``), calls and total; per (name, step) with events, the
    name's index, the step's sample index on the side, its total and its calls."""

    key: np.ndarray
    calls: np.ndarray
    total: np.ndarray
    trace_no: np.ndarray
    pair_key: np.ndarray
    pair_step: np.ndarray
    pair_total: np.ndarray
    pair_count: np.ndarray


class _Collector:
    """Per table: one vocabulary of (normalised) names for both runs, and per side the
    counts, totals and per-step totals of each name, added trace by trace; each step (and
    each trace) labelled with its run and rank."""

    def __init__(self, normalize: bool):
        self.normalize = normalize
        self.index: dict[str, dict[str, int]] = {t: {} for t in TABLES}
        self.raw: dict[str, list[set[str]]] = {t: [] for t in TABLES}
        self.kind: dict[str, list[int]] = {t: [] for t in TABLES}
        self.module: dict[str, list[tuple[str, str]]] = {t: [] for t in TABLES}  # (module, op) per name
        self.parts: dict[tuple[str, str], list[_Part]] = {}
        self.step_ns: dict[str, list[int]] = {"a": [], "b": []}
        self.step_of: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}  # (run, rank) per step
        self.trace_of: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}  # (run, rank) per trace
        self.span_ns: dict[str, list[int]] = {"a": [], "b": []}
        self.info: dict[str, dict[str, Any]] = {
            s: {"runs": 0, "traces": 0, "ranks": [], "events": 0, "steps": 0, "traces_without_steps": 0}
            for s in ("a", "b")}
        self.nest = NestCounts(self.index)
        self._cells: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: per side, per trace: (run, rank, path, steps, events, window, steps analysed); and the traces left out
        self.seen: dict[str, list[tuple[int, int, str | None, int, int, str, str]]] = {"a": [], "b": []}
        self._later: list[tuple[str, int, TraceSums]] = []  # the traces without steps: added at settle

    def add(self, side: str, run: int, rank: int, sums: TraceSums) -> None:
        info = self.info[side]
        info["runs"] = max(info["runs"], run + 1)
        if rank not in info["ranks"]:
            info["ranks"].append(rank)
        if sums.sources > 1:
            note = (f"run {side.upper()} trace {info['traces']} holds {sums.sources} sources (merged ranks): "
                    "their steps merge by number into one sample each; pass the ranks as separate traces "
                    "to test each rank")
            log.warning("diff: %s", note)
            info.setdefault("warnings", []).append(note)
        trace_no = info["traces"]
        info["traces"] += 1
        if sums.recorded and sums.recorded not in info.setdefault("recorded", []):
            info["recorded"].append(sums.recorded)
        self.seen[side].append((run, rank, sums.path, len(sums.step_ns), sums.events, sums.window, sums.analysed))
        info["events"] += sums.events
        info["steps"] += len(sums.step_ns)
        info["traces_without_steps"] += int(not len(sums.step_ns))
        offset = len(self.step_ns[side])  # this trace's steps are samples offset.. of the side
        self.step_ns[side].extend(sums.step_ns.tolist())
        self.step_of[side].extend([(run, rank)] * len(sums.step_ns))
        self.trace_of[side].append((run, rank))
        self.span_ns[side].append(sums.span_ns)
        if len(sums.step_ns):
            self._add_tables(side, trace_no, offset, sums)
        else:  # its names and times wait: left out where the diff is per step (settle)
            self._later.append((side, trace_no, sums))

    def _add_tables(self, side: str, trace_no: int, offset: int, sums: TraceSums) -> None:
        """One trace's tables: its names into the vocabularies, its counts, totals and
        per-step totals (its steps: the side's samples ``offset``..) and its nesting."""
        keys = {table: self._keys(table, t) for table, t in sums.tables.items()}
        self.nest.add(side, sums.nest, keys)
        for table, t in sums.tables.items():
            g = keys[table]
            self.parts.setdefault((side, table), []).append(
                _Part(g, t.count, t.total, np.full(len(g), trace_no), g[t.pair_name], offset + t.pair_step,
                      t.pair_total, t.pair_count))

    def _keys(self, table: str, t: TableSums) -> np.ndarray:
        """Index in the table's vocabulary of each of ``t``'s raw names (normalised)."""
        index, raw, kinds = self.index[table], self.raw[table], self.kind[table]
        out = np.empty(len(t.names), np.int64)
        mods = self.module[table]
        for i, name in enumerate(t.names):
            mod = t.modules[i] if t.modules is not None else ""
            if not mod:
                key = role_name(normalize_name(name)) if self.normalize else name
            else:  # an op of a known module: the module's name without its program id, the op's with its .N
                mod = normalize_name(mod) if self.normalize else mod
                key = f"{mod}/{normalize_op_name(name) if self.normalize else name}"
            j = index.setdefault(key, len(index))
            if j == len(raw):
                raw.append(set())
                kinds.append(int(t.kinds[i]))
                mods.append((mod, key[len(mod) + 1:] if mod else key))
            raw[j].add(f"{t.modules[i]}/{name}" if mod and t.modules is not None else name)
            out[i] = j
        return out

    def one_trace_per_run(self) -> bool:
        """Whether every run of both sides is one trace; if so, their ranks become one
        stratum (a trace of rank 0 is compared with one of rank 1)."""
        runs = {(s, run) for s in ("a", "b") for run, _ in self.trace_of[s]}
        if len(runs) != sum(len(self.trace_of[s]) for s in ("a", "b")):
            return False
        for s in ("a", "b"):
            self.step_of[s] = [(run, 0) for run, _ in self.step_of[s]]
            self.trace_of[s] = [(run, 0) for run, _ in self.trace_of[s]]
        return True

    def settle(self) -> bool:
        """Whether the samples are whole traces: where a side has no trace with steps (its
        time per step is unknown; each trace is then one sample). Else the samples are
        steps, and the traces without steps are left out of the diff (:meth:`_leave_out`):
        a trace without steps has no time per step, and compared whole beside traces of
        11 and 23 steps, each trace's time measures how long its run is, not how fast its
        steps are (docs/analysis.md, "A trace without steps")."""
        whole = any(self.info[s]["traces_without_steps"] == self.info[s]["traces"] for s in ("a", "b"))
        if whole:
            for side, trace_no, sums in self._later:
                self._add_tables(side, trace_no, 0, sums)  # (no steps: no per-step cells)
        else:
            for side in ("a", "b"):
                self._leave_out(side)
        self._later = []
        for side in ("a", "b"):  # each kept trace's window, said once where they are alike (diff_sides)
            self.info[side].update(side_info(self.seen[side], [whole or bool(x[3]) for x in self.seen[side]]))
        return whole

    def _leave_out(self, side: str) -> None:
        """The side's traces without steps out of its counts (runs, traces, ranks,
        events, window; their tables were never added) and out of its traces' labels and
        spans (so :meth:`one_trace_per_run` counts the traces kept), each named in
        ``info["left_out"]``."""
        seen = self.seen[side]
        gone = [i for i, x in enumerate(seen) if not x[3]]
        if not gone:
            return
        kept = [x for x in seen if x[3]]
        self.trace_of[side] = [t for t, x in zip(self.trace_of[side], seen) if x[3]]
        self.span_ns[side] = [t for t, x in zip(self.span_ns[side], seen) if x[3]]
        info = self.info[side]
        info["left_out"] = [{"run": seen[i][0], "rank": seen[i][1], "path": seen[i][2], "why": "no steps"}
                            for i in gone]
        info.update(runs=len({x[0] for x in kept}), traces=len(kept), events=sum(x[4] for x in kept),
                    ranks=list(dict.fromkeys(x[1] for x in kept)))
        info["runs_seen"] = len({x[0] for x in seen})

    def n_runs(self, side: str) -> int:
        return max(self.info[side]["runs"], 1)

    def sums(self, side: str, table: str) -> tuple[np.ndarray, np.ndarray]:
        """count and total per name, summed over every trace of the side."""
        n = len(self.index[table])
        count, total = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for p in self.parts.get((side, table), []):
            np.add.at(count, p.key, p.calls)  # two raw names of one trace may normalise to one
            np.add.at(total, p.key, p.total)
        return count, total

    def samples(self, side: str, table: str, whole: bool) -> SparseSamples:
        """The names x samples of one side, as its cells with data (absent ones are 0):
        per-step totals, or (``whole``) each trace's totals; with each sample's run and
        rank. Memory: the (name, step) pairs with events, not names x steps."""
        labels = self.trace_of[side] if whole else self.step_of[side]
        row, col, val = self._sparse(side, table, "total" if whole else "pair_total")
        lab = np.array(labels, np.int64).reshape(-1, 2)
        return SparseSamples(row, col, val, len(self.index[table]), lab[:, 0], lab[:, 1])

    def steady_calls(self, side: str, table: str) -> np.ndarray:
        """Per name: whether every step of each rank of the side calls it the same number
        of times (0 included). A program calls its ops so; a runtime's waits and polls,
        which scheduling makes, vary from step to step. Ranks may call it differently (a
        job whose rank 1 alone runs more matmuls: before, no row of such a job was steady,
        and its program's change went unsaid)."""
        row, col, val = self._sparse(side, table, "pair_count")
        ranks = np.array([rank for _, rank in self.step_of[side]], np.int64)
        out = np.ones(len(self.index[table]), bool)
        for r in np.unique(ranks).tolist():
            cols = np.flatnonzero(ranks == r)
            renum = np.full(len(ranks), -1, np.int64)
            renum[cols] = np.arange(len(cols))
            keep = renum[col] >= 0
            lab = np.zeros(len(cols), np.int64)
            x = SparseSamples(row[keep], renum[col[keep]], val[keep], len(self.index[table]), lab, lab)
            out &= x.row_min() == x.row_max()
        return out

    def _sparse(self, side: str, table: str, field: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(name, sample, value) of each cell with data of a field of the side's parts
        (``total``: per trace; else per step), sorted, the raw names of a name summed
        (kept: the tests, the floors, the charts and the call counts read them)."""
        got = self._cells.get((side, table, field))
        if got is not None:
            return got
        parts = self.parts.get((side, table), [])
        whole = field == "total"
        n_cols = max(len(self.trace_of[side]) if whole else len(self.step_of[side]), 1)
        empty = np.zeros(0, np.int64)
        rows = np.concatenate([empty] + [p.key if whole else p.pair_key for p in parts]).astype(np.int64)
        cols = np.concatenate([empty] + [p.trace_no if whole else p.pair_step for p in parts]).astype(np.int64)
        vals = np.concatenate([empty] + [getattr(p, field) for p in parts]).astype(np.int64)
        flat = rows * n_cols + cols
        order = np.argsort(flat, kind="stable")
        flat = flat[order]
        starts = np.flatnonzero(np.concatenate([[True], flat[1:] != flat[:-1]])) if len(flat) else empty
        val = np.add.reduceat(vals[order], starts) if len(flat) else empty
        got = (flat[starts] // n_cols, flat[starts] % n_cols, val)
        self._cells[(side, table, field)] = got
        return got

    def step_samples(self, side: str, whole: bool) -> Samples:
        values = self.span_ns[side] if whole else self.step_ns[side]
        lab = np.array(self.trace_of[side] if whole else self.step_of[side], np.int64).reshape(-1, 2)
        return Samples(np.asarray(values, np.float64)[None, :], lab[:, 0], lab[:, 1])

    def table(self, table: str, c: Compared, tested: np.ndarray, p_adj: np.ndarray, alpha: float,
              floors: tuple[float, float], testable: bool, out_of_reach: bool = False,
              apart: str | None = None) -> Table:
        names = list(self.index[table])
        n = len(names)
        ca, ta = self.sums("a", table)
        cb, tb = self.sums("b", table)
        ra, rb = self.n_runs("a"), self.n_runs("b")
        per_run = ra > 1 or rb > 1  # with replicates: the mean over a side's runs
        count_a, total_a = (ca / ra, ta / ra) if per_run else (ca, ta)
        count_b, total_b = (cb / rb, tb / rb) if per_run else (cb, tb)
        step_delta, rel = change_of(c.mean_a, c.mean_b)
        # the floors: on the rank that decided the row (it moved as the mean did), else on the mean
        nan = np.full(n, np.nan)
        rank_a = c.rank_mean_a if c.rank_mean_a is not None else nan
        rank_b = c.rank_mean_b if c.rank_mean_b is not None else nan
        one = c.rank_decided >= 0
        rank_delta, rank_rel = change_of(rank_a, rank_b)
        med_a = c.median_a if c.median_a is not None else nan
        med_b = c.median_b if c.median_b is not None else nan
        typical = typical_change(np.where(one, _or(c.rank_median_a, nan), med_a),
                                 np.where(one, _or(c.rank_median_b, nan), med_b))
        sig, change, reason = decide(c.p, p_adj, tested, np.where(one, rank_delta, step_delta),
                                     np.where(one, rank_rel, rel), alpha, floors, testable, typical)
        if out_of_reach:  # no p could pass: "within the noise" would say what the test cannot tell
            reason[reason == "within the noise"] = NO_REACH
        p = c.p
        if apart is not None:  # not compared (diff_sides.not_compared): no test, no change, why
            p = np.full(n, np.nan)
            sig[:], change[:], reason[:] = None, "", apart
        raw = [sorted(r) for r in self.raw[table]]
        cols: dict[str, np.ndarray] = {"name": _objects(names)}
        if table == "kernels":
            cols["kind"] = CLASS_NAMES[np.array(self.kind[table], np.int64)] if n else np.zeros(0, object)
            cols["module"] = _objects([m for m, _ in self.module[table]])
            cols["kernel"] = _objects([k for _, k in self.module[table]])
        delta = total_b - total_a
        cols.update({
            "count_a": count_a, "count_b": count_b, "delta_count": count_b - count_a, "total_ns_a": total_a,
            "total_ns_b": total_b, "delta_total_ns": delta, "step_mean_ns_a": c.mean_a,
            "step_mean_ns_b": c.mean_b, "step_median_ns_a": med_a, "step_median_ns_b": med_b,
            "step_delta_ns": step_delta, "rel_change": rel, "p_value": p,
            "p_adjusted": p_adj, "significant": sig, "change": change, "reason": reason,
            "rank_decided": c.rank_decided.astype(np.int64), "rank_step_mean_ns_a": rank_a,
            "rank_step_mean_ns_b": rank_b, "rank_step_delta_ns": rank_delta,
            "steady_calls": self.steady_calls("a", table) & self.steady_calls("b", table),
            "variants": np.array([len(r) for r in raw], np.int64), "raw_names": _objects(raw)})
        sig_first = np.array([s is True for s in sig.tolist()], bool)
        key = np.where(sig_first, -np.abs(np.nan_to_num(step_delta)), 0.0)
        # significant changes first (largest step change), then the rows not called changed by
        # their size (the larger side's total: a change in total within the noise, a re-run's
        # jitter, does not put a 3% row before a 31% one), then by name
        size = -np.maximum(total_a, total_b).astype(np.float64)
        order = np.lexsort((_objects(names).astype(str) if n else np.zeros(0, str), size, key, ~sig_first))
        return frame(cols, order=order)


def _or(x: np.ndarray | None, default: np.ndarray) -> np.ndarray:
    return default if x is None else x


def _objects(values: Sequence[object]) -> np.ndarray:
    out = np.empty(len(values), object)
    out[:] = values
    return out


def _testable(acc: _Collector, table: str, whole: bool, c: Compared, abs_floor_ns: float) -> np.ndarray:
    """Rows that could reach the absolute floor: some sample (either side) at least at it."""
    n = len(acc.index[table])
    peak = np.zeros(n)
    for side in ("a", "b"):
        peak = np.maximum(peak, acc.samples(side, table, whole).row_max())
    return (peak >= abs_floor_ns) & ~np.isnan(c.p) if n else np.zeros(0, bool)


def _step_time(acc: _Collector, whole: bool, alpha: float, floors: tuple[float, float], test: str) -> dict[str, Any]:
    """Step durations (whole traces' durations when some trace has no steps) of both
    runs, compared with the same test (stalls left out) and floors (a family of its own)."""
    sa, sb = acc.step_samples("a", whole), acc.step_samples("b", whole)
    (ta, out_a), (tb, out_b) = ((sa, 0), (sb, 0)) if whole else (without_stalls(sa, STALL), without_stalls(sb, STALL))
    c = compare(ta, tb, test) if sa.x.shape[1] and sb.x.shape[1] else None
    n_a, n_b = sa.x.shape[1], sb.x.shape[1]
    if c is None:
        return {"steps_a": n_a, "steps_b": n_b, "mean_ns_a": float("nan"), "mean_ns_b": float("nan"),
                "delta_ns": float("nan"), "rel_change": float("nan"), "p_value": float("nan"),
                "significant": None, "change": "", "reason": "not testable", "unit": "trace" if whole else "step"}
    full = compare(sa, sb, test) if out_a + out_b else c  # the mean counts every step
    mean_a, mean_b = float(full.mean_a[0]), float(full.mean_b[0])
    delta = mean_b - mean_a
    rel = delta / mean_a if mean_a > 0 else float("nan")
    # the floors and the direction: of the typical (median) step, which a few stalls do not move (they move the
    # mean, and the mean of the log times that the test weighs: an A/A pair read +155%, p=0.038, median +0.4%)
    med_a, med_b = float(np.median(sa.x[0])), float(np.median(sb.x[0]))
    med_rel = (med_b - med_a) / med_a if med_a > 0 else float("nan")
    p = float(c.p[0])
    testable = c.untestable is None
    sig, change, reason = decide(c.p, c.p, np.ones(1, bool), np.array([med_b - med_a]), np.array([med_rel]), alpha,
                                 floors, testable)
    way = test_way(ta, tb, test)  # called only where the test found the median's direction
    if change[0] and way != np.sign(med_b - med_a):
        sig[0], change[0], reason[0] = False, "", APART
    if testable and c.min_p >= alpha:  # the rank test at these sizes: no p can pass (3 runs a side: 0.1)
        reason[0] = NO_REACH
    return {"steps_a": n_a, "steps_b": n_b, "mean_ns_a": mean_a, "mean_ns_b": mean_b, "delta_ns": delta,
            "rel_change": rel, "median_delta_ns": med_b - med_a, "median_rel_change": med_rel, "p_value": p,
            "test": test, "test_way": way, "smallest_p": c.min_p, "sizes": _sizes(c, "trace" if whole else "step"),
            "stalls_out": out_a + out_b, "stalls_out_a": out_a, "stalls_out_b": out_b,
            "significant": sig[0], "change": change[0],
            "reason": reason[0], "unit": "trace" if whole else "step", **_longest("a", sa), **_longest("b", sb)}


def _sizes(c: Compared, unit: str) -> str:
    """What the step time's test weighed, in words: "3 vs 3 runs" (its first rank's)."""
    if not c.sizes:
        return ""
    n_a, n_b, runs = c.sizes[0]
    return f"{n_a} vs {n_b} {'runs' if runs else unit + 's'}"


def _longest(side: str, s: Samples) -> dict[str, float | int]:
    """A side's longest step (and its rank), its median step, and its stalls (steps of at
    least ``diff_verdict.STALL`` times the median: how many, and what they add to the
    mean over the median): a stall can move the mean where the test, which weighs each
    step alike, sees no change (the verdict says so)."""
    x = s.x[0]
    k, med = int(np.argmax(x)), float(np.median(x))
    stalls = x[x >= STALL * med] if med > 0 else x[:0]
    return {f"longest_ns_{side}": float(x[k]), f"longest_rank_{side}": int(s.rank[k]), f"median_ns_{side}": med,
            f"ranks_{side}": len(set(s.rank.tolist())), f"stalls_{side}": len(stalls),
            f"stall_ns_{side}": float((stalls - med).sum()) / len(x)}


def _keep_samples(acc: _Collector, tables: dict[str, Table], whole: bool) -> list[dict[str, Any]]:
    """The per-step totals of the rows with the largest per-step change, significant
    ones first (at most KEEP_SAMPLES), for the charts of the HTML diff."""
    cands = []
    for t, df in tables.items():
        sig = np.array([s is True for s in column(df, "significant").tolist()], bool)
        delta = np.abs(np.nan_to_num(column(df, "step_delta_ns").astype(np.float64)))
        names = column(df, "name")
        for i in range(len(df)):
            cands.append((not sig[i], -delta[i], t, str(names[i])))
    cands.sort()
    out = []
    steps = {side: acc.step_samples(side, whole) for side in ("a", "b")}
    if all(st.x.shape[1] for st in steps.values()):  # the step time first
        out.append({"table": "steps", "name": "trace time" if whole else "step time",
                    **{side: {"ns": st.x[0].tolist(), "run": st.run.tolist(), "rank": st.rank.tolist()}
                       for side, st in steps.items()}})
    for _, _, t, name in cands[:KEEP_SAMPLES]:
        j = acc.index[t][name]
        entry: dict[str, Any] = {"table": t, "name": name}
        for side in ("a", "b"):
            s = acc.samples(side, t, whole)
            entry[side] = {"ns": s.dense(j, j + 1)[0].tolist(), "run": s.run.tolist(), "rank": s.rank.tolist()}
        out.append(entry)
    return out
