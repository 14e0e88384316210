"""Two things a diff's verdict says about its samples (``analyze/diff.py`` finds them):

* which traces it left out, and why it compares per trace (:func:`sample_notes`): a
  trace without steps has no time per step. Where both sides have traces with steps,
  the diff compares per step over those and leaves the others out, naming them; where a
  side has none, each trace is one sample, and a note says that a trace's time is then
  as long as its run: a run of more steps reads as slower, though each step is not;
* that no row could have been called changed (:func:`reach`): the rank test's p-value
  is bounded below by its sample sizes (5 runs a side: 2/252 = 0.0079), and a correction
  across many rows can put that bound above ``alpha`` (Holm across 9 rows: 0.071). The
  statistics are left as they are; the verdict says so, and what would reach it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .diff_sides import steps_words
from .diff_stats import Compared, smallest_p
from .ranktest import CORRECTIONS

#: the largest sample size a side :func:`reach` looks for, a side, to name what would reach alpha
MOST_NEEDED = 1000
#: traces left out named in the verdict, at most (``overview[side]["left_out"]`` has all)
NAMED = 3


def reach(compared: dict[str, Compared], rows: int, alpha: float, correction: str,
          test: str) -> dict[str, Any] | None:
    """Where no row's test, whatever its data, can give an adjusted p-value under
    ``alpha`` (``rows`` tested, corrected by ``correction``): the smallest p it can give
    (``diff_stats.smallest_p``), that p adjusted as the best case of the family (every
    row at it: Holm multiplies it by the rows, Benjamini-Hochberg leaves it), the sizes,
    how many a side would reach ``alpha``, and the verdict's line; None where a row can
    be called (the t test's p has no such bound)."""
    if test != "rank" or rows < 1:
        return None
    c = next((c for c in compared.values() if c.sizes), None)
    if c is None or c.sizes is None:  # (nothing testable: the verdict says why)
        return None
    least = c.min_p
    best = _adjusted(least, rows, correction)
    if best < alpha:
        return None
    runs = all(r for _, _, r in c.sizes)
    n_a, n_b = max(a for a, _, _ in c.sizes), max(b for _, b, _ in c.sizes)
    unit = "runs" if runs else "steps"
    need = next((n for n in range(max(n_a, n_b, 2), MOST_NEEDED + 1)
                 if _adjusted(smallest_p([(n, n, runs)] * len(c.sizes), len(c.sizes), test), rows, correction)
                 < alpha), None)
    where = f" on each of {len(c.sizes)} ranks" if len(c.sizes) > 1 else ""
    sizes = f"{n_a} {unit} a side" if n_a == n_b else f"{n_a} {unit} in A and {n_b} in B"
    more = (f"more {unit} ({need} a side can reach it)" if need is not None else f"more {unit}") + " or --test t"
    text = (f"No row can be called changed: with {sizes}{where} the rank test (Mann-Whitney U) cannot reach "
            f"p < {alpha:g} after the {correction} correction across {rows} rows: the smallest p it can give is "
            f"{least:.2g}, {best:.2g} adjusted, whatever the times; use {more}.")
    return {"test": test, "smallest_p": least, "smallest_adjusted_p": best, "rows_tested": rows,
            "correction": correction, "alpha": alpha, "sizes": [list(s) for s in c.sizes], "unit": unit,
            "needed_a_side": need, "text": text}


def _adjusted(p: float, rows: int, correction: str) -> float:
    """The smallest adjusted p-value of ``rows`` rows when each has p-value ``p``."""
    return float(np.min(CORRECTIONS[correction](np.full(rows, p))))


def sample_notes(ov: dict[str, Any]) -> list[str]:
    """The verdict's notes on the samples: the traces left out (no steps) where the diff
    is per step; where it is per trace, that a trace's time is then as long as its run,
    where a side's traces have steps (so runs of other lengths read as slower or faster)."""
    per_step = ov["samples"] == "steps"
    out = []
    gone = [(s, x) for s in ("a", "b") for x in ov[s].get("left_out", [])]
    if gone and per_step:
        runs = {s: ov[s]["runs"] > 1 or ov[s].get("runs_seen", 1) > 1 for s in ("a", "b")}
        ranks = {s: len(ov[s]["ranks"]) > 1 or any(x["rank"] for x in ov[s].get("left_out", [])) for s in ("a", "b")}
        named = "; ".join(_trace(s, x, runs[s], ranks[s]) for s, x in gone[:NAMED])
        more = f"; and {len(gone) - NAMED} more" if len(gone) > NAMED else ""
        per = "; ".join(f"{s.upper()} {_per_trace(ov[s])} steps a trace" for s in ("a", "b"))
        out.append(f"Note: left out: {named}{more}: {'a trace' if len(gone) == 1 else 'traces'} without steps. The "
                   f"diff compares time per step, over the traces with steps ({per}): a trace without steps has no "
                   "time per step, and compared whole beside the others, each trace's time would measure how long "
                   "its run is, not how fast its steps are.")
    if per_step:
        return out
    stepless = [s for s in ("a", "b") if ov[s]["traces_without_steps"] == ov[s]["traces"]]
    stepped = [s for s in ("a", "b") if s not in stepless]
    if not stepped:  # (no side has steps: whole traces, nothing else to compare)
        return out
    held = "; ".join(_held(s, ov[s]) for s in stepped)
    none = " and ".join(f"{s.upper()}'s" for s in stepless)
    out.append(f"Note: the diff compares whole traces, one sample a trace, as {none} have no steps; {held}. A "
               "trace's time is as long as its run: a run of more steps reads as slower, however fast its steps "
               f"(record steps in {' and '.join(s.upper() for s in stepless)}, with polyprof.step() or "
               "torch.profiler's schedule, to compare per step).")
    return out


def _per_trace(o: dict[str, Any]) -> str:
    """A side's analysed steps a trace with steps: "11", or "11 to 39" where they differ
    (not their mean, which no trace may have)."""
    if o.get("steps_per_trace"):
        return steps_words(o["steps_per_trace"])
    with_steps = max(o["traces"] - (0 if o.get("left_out") else o["traces_without_steps"]), 1)
    return f"{o['steps'] / with_steps:.3g}"


def _held(side: str, o: dict[str, Any]) -> str:
    """"A's traces hold 11 steps each" (its analysed steps), and its traces without any."""
    none = f" ({o['traces_without_steps']} of its {o['traces']} traces have none)" if o["traces_without_steps"] else ""
    return f"{side.upper()}'s traces hold {_per_trace(o)} analysed steps each{none}"


def _trace(side: str, x: dict[str, Any], runs: bool, ranks: bool) -> str:
    """A trace left out, as the verdict names it: "B's run 5 (rec/nostep1.polyprof)", its
    rank too where the side has several."""
    where = (f"run {x['run'] + 1}" if runs else "run") + (f", rank {x['rank']}" if ranks else "")
    return f"{side.upper()}'s {where}" + (f" ({x['path']})" if x.get("path") else "")
