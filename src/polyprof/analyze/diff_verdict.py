"""The verdict of a diff in words: a headline, the step time, what got slower and
faster, what did not change (``analyze/diff.py`` computes, this says it)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..trace.sorting import unique
from .diff_nesting import NestCounts, items
from .diff_sides import steps_words
from .diff_stats import LOG_OFFSET_NS, NO_REACH, Samples, mean_of_runs
from .frames import column

LABELS = {"kernels": "kernel", "ops": "op", "sections": "section"}
#: device activity rows by their ``kind`` (the kernels table's column): copies and memsets are no kernels
KIND_LABELS = {"memcpy": "copy", "memset": "memset"}


def label(table: str, kind: object = "") -> str:
    """What the verdict calls a row of ``table``: an op, a section; on the device a kernel,
    a copy or a memset, by the row's ``kind``."""
    return KIND_LABELS.get(str(kind), LABELS[table]) if table == "kernels" else LABELS[table]


def _kind(df: Any, table: str, i: int) -> str:
    """Row ``i``'s ``kind`` (device activity only; "" for host rows)."""
    return str(column(df, "kind")[i]) if table == "kernels" else ""


def _pct(x: float) -> str:
    return "new" if x != x or x == float("inf") else "gone" if x == -1 else f"{100 * x:+.1f}%"


#: names in the verdict are shortened to this many characters, in the middle
NAME_WIDTH = 60


def short_names(names: list[str], width: int = NAME_WIDTH) -> dict[str, str]:
    """Each of ``names`` in at most ``width`` characters, shortened in the middle (its
    start and its end kept: kernels differ at both, the table's names are cut so too),
    wider where two would read the same; a name that no width under its own keeps apart
    stays whole."""
    wide = {name: width for name in set(names)}
    while True:
        out = {name: _middle(name, w) for name, w in wide.items()}
        seen: dict[str, list[str]] = {}
        for name, cut in out.items():
            seen.setdefault(cut, []).append(name)
        clash = [name for group in seen.values() if len(group) > 1 for name in group]
        if not clash:
            return out
        for name in clash:  # a character more for each name that reads as another
            wide[name] += 1


def _middle(name: str, width: int) -> str:
    """``name`` in ``width`` characters: its start, "…", its last 40%."""
    if len(name) <= width:
        return name
    tail = round((width - 1) * 0.4)
    return name[: width - 1 - tail] + "…" + (name[len(name) - tail:] if tail else "")


def _item(c: dict[str, Any], fmt_ns: Callable[[float], str], name: str, names: dict[str, str] | None = None,
          unit: str = "step") -> str:
    """A changed row: its mean per ``unit`` (step, or trace where the samples are whole
    traces; over the ranks), and the rank whose own test called it with that rank's
    change; the rows nested with it that moved with it (one change, ``diff_nesting``),
    named by ``names``."""
    a, b = c["step_mean_ns_a"], c["step_mean_ns_b"]
    rel = (b - a) / a if a > 0 else float("nan")
    where = ""
    if c.get("rank_decided", -1) >= 0:
        ra, rb = c["rank_step_mean_ns_a"], c["rank_step_mean_ns_b"]
        where = (f"; on rank {c['rank_decided']}: {fmt_ns(ra)} -> {fmt_ns(rb)}, "
                 f"{_pct((rb - ra) / ra if ra > 0 else float('nan'))}")
    return (f"{label(c['table'], c.get('kind', ''))} {name} {fmt_ns(a)} -> {fmt_ns(b)} per {unit} ({_pct(rel)}, "
            f"p={c['p_adjusted']:.2g}{where}{_nested(c.get('nested') or [], names or {})})")


def _nested(rows: list[dict[str, Any]], names: dict[str, str], how: str = "moved with it") -> str:
    """"; with op X and op Y around it, which moved with it": the other rows of a change
    (or of an item of another list, ``how`` they went with it), by their relation to the
    row named (the nearest first)."""
    if not rows:
        return ""
    parts = []
    for relation in ("around", "inside", "beside"):
        these = [f"{label(r['table'], r.get('kind', ''))} {names.get(r['name'], r['name'])}" for r in rows if r["relation"] == relation]
        if these:
            parts.append(f"{', '.join(these[:-1])}{' and ' if len(these) > 1 else ''}{these[-1]} {relation} it")
    return f"; with {' and '.join(parts)}, which {how}"


def verdict_lines(tables: dict[str, Any], st: dict[str, Any], changes: list[dict[str, Any]], ov: dict[str, Any],
                  top: int, fmt_ns: Callable[[float], str], nest: NestCounts | None = None,
                  apart: list[str] | None = None) -> list[str]:
    """A headline, then the step time, what got slower, what got faster, what did not
    change; times written by ``fmt_ns``. ``nest``: the rows' nesting, by which the
    lists of rows group nested rows that moved together into one item (``diff_nesting``;
    None: a row an item). ``apart``: the words for the tables not compared
    (``diff_sides.lines``; ``ov["not_compared"]`` names them), whose rows the verdict
    leaves out; where every row is, they are the headline, and the step time follows."""
    tables = {t: df for t, df in tables.items() if t not in (ov.get("not_compared") or {})}
    if apart and not any(len(df) for df in tables.values()):  # nothing compared but the step time
        return apart + _step_lines(st, f"{100 * ov['rel_floor']:g}% and {fmt_ns(ov['abs_floor_ns'])} per "
                                       f"{st.get('unit', 'step')}", ov["untestable"] is None, None, fmt_ns)
    reason = ov["untestable"]
    unit = st.get("unit", "step")
    floor = f"{100 * ov['rel_floor']:g}% and {fmt_ns(ov['abs_floor_ns'])} per {unit}"
    out_of_reach = (ov.get("reach") or {}).get("text")  # no row's test could pass (diff_notes.reach)
    step_changed = bool(st.get("change"))
    top = max(top, 1)  # (a verdict that names no row would list nothing: "Slower in B (2):  (and 2 more).")
    lines = []
    runs = (max(ov["a"]["runs"], 1), max(ov["b"]["runs"], 1))
    # calls added, dropped or repeated alike in every step of every run of a side: with replicates too
    other, other_rows = (_other_work(tables, st, ov["abs_floor_ns"], fmt_ns, nest, runs)
                         if reason is None and ov["samples"] == "steps" else ([], set()))
    if reason is not None:
        lines.append("Not tested: no change can be called significant.")
    elif not changes and not step_changed and st.get("reason") != APART:
        head = (f"{CHANGED}; no row's time changed significantly" if other else
                "No significant change")  # (not "No significant change" above "B runs other work")
        if out_of_reach and not other:  # (not "No significant change": no change could have been called)
            lines.append(out_of_reach)
            out_of_reach = None
        else:
            lines.append(f"{head} (alpha {ov['alpha']:g}, {ov['correction']}-corrected across "
                         f"{ov['rows_tested']} rows; changes under {floor} are not called changes).")
    else:
        leads = [c for c in changes if c.get("lead", True)]  # nested rows that moved together: one change
        # a row new in B or gone from it apart: not a slower or faster one (XLA's fusions
        # re-made around an added op read "2 faster" where nothing ran faster)
        new = sum(not c["step_mean_ns_a"] > 0 for c in leads)
        gone = sum(not c["step_mean_ns_b"] > 0 and c["step_mean_ns_a"] > 0 for c in leads)
        slower = sum(c["change"] == "slower" and c["step_mean_ns_a"] > 0 for c in leads)
        faster = len(leads) - slower - new - gone
        came = (f", {new} new" if new else "") + (f", {gone} gone" if gone else "")
        counts = (f"{slower} row(s) slower, {faster} faster{came}" if len(leads) == len(changes) else
                  f"{slower} change(s) slower, {faster} faster{came}, in {len(changes)} rows (nested rows "
                  "that moved together count as one change)")
        if step_changed:
            lines.append(f"B is {st['change']}: median {unit} time {_pct(st['median_rel_change'])} (mean "
                         f"{_pct(st['rel_change'])}); {counts}.")
        else:
            what = f"changes in B: {counts}" if changes else "no row changed"
            lines.append(f"{f'{CHANGED}; {what}' if other else what[0].upper() + what[1:]}; "
                         f"{_step_headline(st, ov, unit)}.")
    if out_of_reach:
        lines.append(out_of_reach)
    lines += apart or []
    if st["steps_a"] and st["steps_b"] and st["mean_ns_a"] == st["mean_ns_a"]:
        lines += _step_lines(st, floor, reason is None, tables if not changes else None, fmt_ns,
                             (ov["rel_floor"], ov["abs_floor_ns"]), nest)
    if reason is not None:
        lines.append(f"No change is called significant: {reason}.")
        return lines + _largest(tables, unit, top, fmt_ns)
    names = short_names([c["name"] for c in changes])
    one_run = ov["samples"] == "steps" and runs == (1, 1)
    for direction in ("slower", "faster"):
        sel = [c for c in changes if c["change"] == direction and c.get("lead", True)]
        if sel:
            more = f" (and {len(sel) - top} more)" if len(sel) > top else ""
            lines.append(f"{direction.capitalize()} in B ({len(sel)}): " +
                         "; ".join(_item(c, fmt_ns, names[c["name"]], names, unit) for c in sel[:top]) + more + ".")
    lines.append(_unchanged(tables, changes, other_rows, ov, floor))
    if ov["samples"] != "steps":
        return lines
    if other:
        more = f" (and {len(other) - top} more)" if len(other) > top else ""
        lines.append(f"B runs other work: {'; '.join(other[:top])}{more}. A change of the machine or of its load "
                     "does not add, drop or repeat calls: the program changed.")
    if not one_run:
        return lines
    timed = [c for c in changes if c.get("lead", True) and (c["table"], c["name"]) not in other_rows]
    if other and (timed or st.get("change")):  # (other work proves the program changed, not that these times did)
        lines.append(_one_run_times(st, timed, names))
    elif st.get("change"):  # (two runs of one program, one a side, were called +74% at p 7.8e-07 with 2 rows)
        lines.append(_machine_line(st, changes, names, tables))
    else:
        lines.append("One run a side: the noise is step-to-step only; run-to-run variance is tested when each side "
                     "has several runs (polyprof diff A1 A2 A3 -- B1 B2 B3; two a side call only large changes).")
    return lines


def _one_run_times(st: dict[str, Any], timed: list[dict[str, Any]], names: dict[str, str]) -> str:
    """The last line where one run a side runs other work and times are called changed
    (``timed``: the changed rows that are not other work; the step time): that they are
    measured against step-to-step noise only. Before, "B runs other work ... the program
    changed" took this line's place, and a dropped ``aten::tanh`` stood beside an
    ``aten::sum`` +202% and a step +6.5% that the machine had made (the program's own
    timer: +6.4% on a step that lost 0.11 ms of work)."""
    said = [f"{label(c['table'], c.get('kind', ''))} {names.get(c['name'], c['name'])} "
            f"{_pct(_rel(c['step_mean_ns_a'], c['step_mean_ns_b']))}" for c in timed[:3]]
    said += [f"and {len(timed) - 3} more"] if len(timed) > 3 else []
    if st.get("change"):
        said.append(f"the {st.get('unit', 'step')} time {_pct(st['median_rel_change'])}")
    return (f"One run a side: the times called changed ({'; '.join(said)}) are measured against step-to-step noise "
            "only, and the calls B adds or drops do not say whether they moved with the program or with the machine: "
            "a change of the machine or of its load between the runs (another node, other work beside it) moves "
            "times too; runs taking turns (A, B, A, B) and three or more runs a side tell them apart (polyprof diff "
            "A1 A2 A3 -- B1 B2 B3).")


def _unchanged(tables: dict[str, Any], changes: list[dict[str, Any]], other_rows: set[tuple[str, str]],
               ov: dict[str, Any], floor: str) -> str:
    """"Unchanged: N of M ...": the rows neither called changed, nor other work
    (``other_rows``), nor new or gone (under the floor, where other work does not name
    them: before, a torch run against a JAX one, no row in both, read "Unchanged: 6 of
    21", six torch ops gone), with how many of each."""
    total = sum(len(df) for df in tables.values())
    floored = sum(int((column(df, "reason") == "below the effect floor").sum()) for df in tables.values())
    called = {(c["table"], c["name"]) for c in changes}
    apart = other_rows - called  # other work, not called changed
    came = {(t, str(n)) for t, df in tables.items()
            for n, a, b in zip(column(df, "name").tolist(), column(df, "count_a").tolist(),
                               column(df, "count_b").tolist()) if (a == 0) != (b == 0)} - called - apart
    return (f"{'Not called changed (none could be, above)' if ov.get('reach') else 'Unchanged'}: "
            f"{total - len(called) - len(apart) - len(came)} of {total} {_held(tables)}"
            + (f" ({floored} beyond the noise but under {floor})" if floored else "")
            + (f"; {len(apart)} more are other work (below)" if apart else "")
            + (f"; {len(came)} more are new or gone" if came else "")
            + f"; test: {ov['test']}, {ov['correction']}-adjusted across {ov['rows_tested']} rows tested, "
              f"alpha {ov['alpha']:g}.")


#: the step time and the changed rows "moved together" (as a change of the machine or of its
#: load moves them) where their relative changes, all one way, are within this factor of
#: one another: +20% to +40% are, a section +15,843% beside an op +13% is not
ALIKE = 3.0
#: a row not called changed holds a sizeable share of the step where its time per step in A
#: is at least this share of A's mean step: a change of the machine would have moved it too
SIZEABLE = 0.1


def _machine_line(st: dict[str, Any], changes: list[dict[str, Any]], names: dict[str, str],
                  tables: dict[str, Any]) -> str:
    """The last line where one run a side has its step time called changed: that a change
    of the machine or of its load does that as much as one of the program ("moved
    together" where every changed row moved alike with it: :data:`ALIKE`), or, where
    the rows moved unalike or sizeable rows did not move with them (:func:`_still`),
    that a machine slower for everything moves every row alike, and that a busier one
    slows the rows that compute, not those that wait or sleep (an A/A pair on a loaded
    machine: ``aten::mm`` +290% beside a sleeping section's +4%)."""
    way = st["change"]
    tail = ("runs taking turns (A, B, A, B) and three or more runs a side tell them apart "
            "(polyprof diff A1 A2 A3 -- B1 B2 B3).")
    machine = ("a change of the machine or of its load between the runs (another node, other work beside it) "
               "does that as much as a change of the program; ")
    along = [c for c in changes if c["change"] == way]
    if not along or len(along) != len(changes):
        return f"The step time is called {way} with one run a side: {machine}{tail}"
    rel = [(abs(_rel(c["step_mean_ns_a"], c["step_mean_ns_b"])), c) for c in changes]
    step = abs(float(st["rel_change"]))
    finite = [r for r, _ in rel] + [step]
    if all(r > 0 and r != float("inf") for r in finite) and max(finite) <= ALIKE * min(finite):
        still = _still(tables, st, changes)
        if not still:
            return f"The step time and every changed row moved together ({way}): {machine}{tail}"
        moved = "; ".join(f"{label(c['table'], c.get('kind', ''))} {names.get(c['name'], c['name'])} "
                          f"{_pct(_rel(c['step_mean_ns_a'], c['step_mean_ns_b']))}"  # signed, as the rows say
                          for r, c in sorted(rel, key=lambda x: -x[0] * abs(x[1]["step_mean_ns_a"]))[:3])
        short = short_names([n for _, n, _, _ in still])
        kept = ", ".join(f"{what} {short[n]} {_pct(r)} at {100 * share:.0f}% of A's step"
                         for what, n, r, share in still[:3])
        return (f"The step time is called {way} with one run a side and its change is in the changed rows ({moved}), "
                f"not a slower machine: rows holding {100 * SIZEABLE:g}% of A's step or more did not move with it "
                f"({kept}; the step time {_pct(float(st['rel_change']))}: more than {ALIKE:g} times apart), while a "
                "machine slower for everything moves every sizeable row alike (a busier one, though, slows the rows "
                "that compute and not those that wait or sleep).")
    order = sorted(rel, key=lambda x: (x[0] != x[0], x[0]))  # (a row new in B, of no ratio: last)
    lo, hi = order[0][1], order[-1][1]
    rows = (f"{label(hi['table'], hi.get('kind', ''))} {names.get(hi['name'], hi['name'])} "
            f"{_pct(_rel(hi['step_mean_ns_a'], hi['step_mean_ns_b']))}"
            + (f" against {label(lo['table'], lo.get('kind', ''))} {names.get(lo['name'], lo['name'])} "
               f"{_pct(_rel(lo['step_mean_ns_a'], lo['step_mean_ns_b']))}" if lo is not hi else "")
            + f", the step time {_pct(float(st['rel_change']))}")
    return (f"The step time is called {way} with one run a side and its changed rows moved unalike ({rows}: more "
            f"than {ALIKE:g} times apart), unlike a machine slower for everything, which moves every row alike; a "
            f"busier machine, though, slows the rows that compute and not those that wait or sleep; {tail}")


def _still(tables: dict[str, Any], st: dict[str, Any], changes: list[dict[str, Any]]) -> list[tuple[str, str, float, float]]:
    """The rows not called changed, each :data:`SIZEABLE` of A's step or more, whose relative
    change per step is under the step time's by :data:`ALIKE` (or the other way) while the
    step moved: (what, name, change, share of A's step), the largest first. Only on the side
    (host, device) of a changed row: another node may have the same processor and another GPU."""
    step, mean_a = float(st["rel_change"]), float(st["mean_ns_a"])
    sides = {t == "kernels" for t in (c["table"] for c in changes)}
    called = {(c["table"], c["name"]) for c in changes}
    out = []
    for t, df in tables.items():
        if (t == "kernels") not in sides or not len(df) or not mean_a > 0:
            continue
        a = column(df, "step_mean_ns_a").astype(np.float64)
        rel = np.nan_to_num(column(df, "step_mean_ns_b").astype(np.float64) / np.where(a > 0, a, np.nan) - 1)
        for i in np.flatnonzero((a >= SIZEABLE * mean_a) & (rel * np.sign(step) * ALIKE < abs(step))).tolist():
            if (t, str(column(df, "name")[i])) not in called:
                out.append((label(t, _kind(df, t, i)), str(column(df, "name")[i]), float(rel[i]), a[i] / mean_a))
    return sorted(out, key=lambda x: -x[3])


def _rel(a: float, b: float) -> float:
    """(b - a) / a; NaN where ``a`` is 0 (a row new in B)."""
    return (b - a) / a if a > 0 else float("nan")


def _step_headline(st: dict[str, Any], ov: dict[str, Any], unit: str) -> str:
    """The step time in the headline where it is not called changed: unchanged (its
    median moved less than the floors), not called changed (it moved more, within the
    noise), not called either way (its test and its median disagree), or not tested."""
    med, rel = abs(st.get("median_delta_ns", 0.0)), abs(st.get("median_rel_change", 0.0))
    if st.get("reason") == APART:
        return (f"{unit} time not called either way (typical {unit} {_pct(st['median_rel_change'])}, mean "
                f"{_pct(st['rel_change'])})")
    if st.get("p_value") is None or st["p_value"] != st["p_value"] or st.get("significant") is None:
        return f"{unit} time not tested"
    if st.get("reason") == NO_REACH:
        return f"{unit} time cannot be called (the rank test's smallest p with {st['sizes']} is {st['smallest_p']:.2g})"
    if med >= ov["abs_floor_ns"] and rel >= ov["rel_floor"] and med > 0:
        return f"{unit} time not called changed (median {_pct(st['median_rel_change'])}, p={st['p_value']:.2g})"
    return f"{unit} time unchanged"


def _step_lines(st: dict[str, Any], floor: str, tested: bool, tables: dict[str, Any] | None,
                fmt_ns: Callable[[float], str], floors: tuple[float, float] = (0.0, 0.0),
                nest: NestCounts | None = None) -> list[str]:
    """The step time: its median and mean per step, the test and what it says; the stalls
    that moved its mean; where it is called changed and no row is (``tables`` given), the
    rows that moved by a large part of its change, within the noise, or that none did;
    where its mean moved past the ``floors`` (relative, ns) and its typical step did not,
    that some steps changed and the rows that moved most."""
    unit = st.get("unit", "step")
    what = ("not tested" if not tested or st["significant"] is None else
            {"slower": "B is slower", "faster": "B is faster"}.get(st["change"], "no significant change"))
    if tested and not st["change"] and st.get("reason") == "below the effect floor":
        what = f"no significant change (beyond the noise, under {floor} at the median)"
    if tested and st.get("reason") == NO_REACH:
        what = f"cannot be called: the rank test's smallest p with {st['sizes']} is {st['smallest_p']:.2g}"
    if tested and st.get("reason") == APART:
        way = "longer" if st.get("test_way", 0) > 0 else "shorter"
        test = f"the mean of the log times is {way}" if st.get("test") == "t" else f"the rank test finds them {way}"
        what = (f"not called either way: the typical {unit} is {'shorter' if way == 'longer' else 'longer'} "
                f"({_pct(st['median_rel_change'])}) but {test} (some {unit}s much "
                f"{'slower' if way == 'longer' else 'faster'})")
    out = st.get("stalls_out", 0)
    test = {"rank": "Mann-Whitney U", "t": "t on log times"}.get(st.get("test", ""), "")
    left = (f", {st['stalls_out_a']} of A's and {st['stalls_out_b']} of B's {unit}s left out as stalls"
            if "stalls_out_a" in st else f", {out} stall(s) left out")  # (a JSON of an older diff: the sum)
    test = f" ({test}{left if out else ''})" if test and _p(st["p_value"]) else ""
    several = max(st["steps_a"], st["steps_b"]) > 1  # else the median is the mean is the one sample
    mean = f"; mean {fmt_ns(st['mean_ns_a'])} -> {fmt_ns(st['mean_ns_b'])} ({_pct(st['rel_change'])})"
    lines = [f"{unit.capitalize()} time: {'median ' if several else ''}{fmt_ns(st['median_ns_a'])} -> "
             f"{fmt_ns(st['median_ns_b'])} per {unit} ({_pct(st['median_rel_change'])}){mean if several else ''}"
             f"{_p(st['p_value'])}{test}; {st['steps_a']} vs {st['steps_b']} {unit}s: {what}."]
    if tested and tables is not None and not st["change"] and st.get("reason") != APART and \
            _beyond(st["delta_ns"], st["rel_change"], floors) and \
            not _beyond(st["median_delta_ns"], st["median_rel_change"], floors):
        sign = 1.0 if st["delta_ns"] > 0 else -1.0  # (3 of 11 steps 10x longer: never called, the median unmoved)
        moved = _moved(tables, sign, st["delta_ns"], unit, fmt_ns, nest)
        lines.append(f"The mean {unit} time moved {_pct(st['rel_change'])} while the typical {unit} moved "
                     f"{_pct(st['median_rel_change'])}: some {unit}s much {'longer' if sign > 0 else 'shorter'}, "
                     f"which a test over so few {unit}s does not call"
                     + (f"; moved most: {'; '.join(moved)}." if moved else "."))
    if st["change"] and tested and tables is not None:
        sign = 1.0 if st["change"] == "slower" else -1.0
        moved = _moved(tables, sign, st["delta_ns"] if st["delta_ns"] * sign > 0 else st["median_delta_ns"], unit,
                       fmt_ns, nest)
        lines.append(f"No kernel, op or section is called changed, though some moved by {MOVED_SHARE:.0%} of the "
                     f"{unit} time's change or more: {'; '.join(moved)}." if moved else
                     f"No kernel, op or section is called changed: the {unit} time's change is in no row's typical "
                     f"{unit} (time between them, or many rows each under the floors).")
    return lines + _stalls(st, unit, fmt_ns)


def _beyond(delta_ns: float, rel: float, floors: tuple[float, float]) -> bool:
    """Whether a change moved past both floors (relative, ns per step)."""
    return abs(rel) >= floors[0] and abs(delta_ns) >= floors[1] and delta_ns != 0


def _moved(tables: dict[str, Any], way: float, change: float, unit: str,
           fmt_ns: Callable[[float], str], nest: NestCounts | None = None) -> list[str]:
    """The tested rows, none called changed, whose mean per step moved ``way`` (1 longer,
    -1 shorter) by at least :data:`MOVED_SHARE` of the step time's ``change`` (ns per
    step), largest first, up to three items: a JAX CPU pair read "the change is in no
    row's typical step" beside a kernel +90% (two thirds of it) at p 1. Nested rows that
    moved together are one item, named by the innermost (``diff_nesting.items``: a
    wrapper, its op and the op's callee were three of the three)."""
    found = []
    for t, df in tables.items():
        delta = np.nan_to_num(column(df, "step_delta_ns").astype(np.float64)) * way
        p = column(df, "p_adjusted").astype(np.float64)
        for i in np.flatnonzero((delta >= MOVED_SHARE * abs(change)) & ~np.isnan(p)).tolist():
            found.append((delta[i], t, i))
    rows = [_row(tables[t], t, i, "longer" if way > 0 else "shorter") for _, t, i in sorted(found, key=lambda f: -f[0])]
    shown = items(rows, nest)[:3]
    names = short_names([r["name"] for r in shown] + [n["name"] for r in shown for n in r["nested"]])
    out = []
    for r in shown:
        df, i = tables[r["table"]], r["at"]
        a, b = r["step_mean_ns_a"], r["step_mean_ns_b"]
        why = {"below the effect floor": "beyond the noise, under the floors",
               NO_REACH: "out of the test's reach"}.get(str(column(df, "reason")[i]), "within the noise")
        out.append(f"{label(r['table'], r['kind'])} {names[r['name']]} {fmt_ns(a)} -> {fmt_ns(b)} per {unit} "
                   f"({'+' if b > a else '-'}{fmt_ns(abs(b - a))}, {_pct(column(df, 'rel_change')[i])}, "
                   f"p={column(df, 'p_adjusted')[i]:.2g}, {why}{_nested(r['nested'], names)})")
    return out


def _row(df: Any, table: str, i: int, change: str) -> dict[str, Any]:
    """Row ``i`` of a table as the nesting groups it (``diff_nesting.items``), ``at`` it."""
    a, b = float(column(df, "step_mean_ns_a")[i]), float(column(df, "step_mean_ns_b")[i])
    return {"table": table, "name": str(column(df, "name")[i]), "kind": _kind(df, table, i), "change": change,
            "step_mean_ns_a": a, "step_mean_ns_b": b, "step_delta_ns": float(np.nan_to_num(b - a)), "at": i}


def _largest(tables: dict[str, Any], unit: str, top: int, fmt_ns: Callable[[float], str]) -> list[str]:
    """Where nothing could be tested: the rows whose time per step (the sample) moved
    most, marked untested; rows that did not move are left out."""
    rows = []
    for t, df in tables.items():
        a = column(df, "step_mean_ns_a").astype(np.float64)
        b = column(df, "step_mean_ns_b").astype(np.float64)
        delta = np.nan_to_num(b - a)
        for i in np.flatnonzero(delta != 0)[np.argsort(-np.abs(delta[delta != 0]), kind="stable")][:top].tolist():
            rows.append((abs(delta[i]), label(t, _kind(df, t, i)), str(column(df, "name")[i]), a[i], b[i]))
    rows.sort(key=lambda x: -x[0])
    if not rows:
        return [f"Every row takes the same time per {unit} in A and B."]
    names = short_names([r[2] for r in rows[:top]])
    return [f"Largest differences per {unit} (not tested): " + "; ".join(
        f"{what} {names[name]} {fmt_ns(a)} -> {fmt_ns(b)} ({_pct((b - a) / a if a > 0 else float('nan'))})"
        for _, what, name, a, b in rows[:top]) + "."]


def _held(tables: dict[str, Any]) -> str:
    """What the tables hold, in words ("ops and sections" where no device activity is)."""
    words = [w for t, w in (("kernels", "device activities"), ("ops", "ops"), ("sections", "sections"))
             if t in tables and len(tables[t])]
    return (", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]) if words else "rows"


#: the headline's start where B runs other work (``_other_work``), said below it
CHANGED = "The program changed (B runs other work, below)"
#: a step this many times its side's median step is a stall (as a long first step is set-up)
STALL = 5.0
#: the step time's ``reason`` where its test and its median step moved opposite ways
APART = "the test and the median step moved opposite ways"
#: a row that moved by this share of the step time's change is named where no row is called
MOVED_SHARE = 0.25


def test_way(a: Samples, b: Samples, test: str) -> float:
    """The direction the step time's test found, B against A: 1 longer, -1 shorter, 0
    neither. ``t``: the change of the mean log time (per rank, the mean of its runs' means,
    summed over the ranks); ``rank``: Mann-Whitney's (per rank, the share of (A, B) pairs
    of steps, of run means with several runs, where B is longer less the share where it
    is shorter), summed over the ranks. The median step can move the other way: B's
    typical step 7% shorter and 5 of its 11 steps 3x longer raised the mean log time."""
    total = 0.0
    for r in sorted(set(a.rank.tolist()) & set(b.rank.tolist())):
        xa, xb = (_run_means(s.x[0][s.rank == r], s.run[s.rank == r], test) for s in (a, b))
        if test == "t":
            total += float(xb.mean() - xa.mean())
        else:
            sa = np.sort(xa)
            b_longer = int(np.searchsorted(sa, xb, "left").sum())  # pairs (A, B) with A < B
            b_shorter = int((len(sa) - np.searchsorted(sa, xb, "right")).sum())
            total += (b_longer - b_shorter) / (len(xa) * len(xb))
    return float(np.sign(total))


def _run_means(x: np.ndarray, run: np.ndarray, test: str) -> np.ndarray:
    """One rank's samples as its test weighs them: ``t``, each run's mean log time (one
    run: its steps' log times); ``rank``, the steps (one run), else each run's mean."""
    if test == "t":
        x = np.log(x + LOG_OFFSET_NS)
    return x if len(unique(run)) == 1 else mean_of_runs(x[None, :], run)[0][0]


def _stalls(st: dict[str, Any], unit: str, fmt_ns: Callable[[float], str]) -> list[str]:
    """A side whose longest step is a stall that moves most of the difference of the
    means (a rank that waited 300 ms once), which the typical (median) step does not see
    and the test leaves out (``diff_stats.without_stalls``); said where the step time is
    called changed too (its median moved, the stalls moved its mean further)."""
    out = []
    for side in ("b", "a"):
        top, med, n = st.get(f"longest_ns_{side}", 0.0), st.get(f"median_ns_{side}", 0.0), st.get(f"stalls_{side}", 0)
        moved = abs(st["mean_ns_b"] - st["mean_ns_a"])
        if not n or n * 2 > st[f"steps_{side}"] or st[f"stall_ns_{side}"] < 0.5 * moved:
            continue
        where = f" (rank {st[f'longest_rank_{side}']})" if st.get(f"ranks_{side}", 1) > 1 else ""
        few = "one stall moves" if n == 1 else f"{n} {unit}s of {STALL:g}x the median or more move"
        said = (f"beyond the change of its median {unit}" if st.get("change") else
                f"and the test of the {unit} time leaves {'it' if n == 1 else 'them'} out (as a warm-up)"
                if st.get("stalls_out") else f"which a test weighing every {unit} alike does not call a change")
        out.append(f"{side.upper()}'s longest {unit}{where} took {fmt_ns(top)}, {top / med:,.0f}x its median "
                   f"{unit} ({fmt_ns(med)}): {few} its mean, {said}; polyprof summary of {side.upper()} shows "
                   f"its {unit}s.")
    return out


def _other_work(tables: dict[str, Any], st: dict[str, Any], floor_ns: float,
                fmt_ns: Callable[[float], str], nest: NestCounts | None = None,
                runs: tuple[int, int] = (1, 1)) -> tuple[list[str], set[tuple[str, str]]]:
    """Rows only a change of the program makes, largest first, and every such row (table,
    name; the items name only the first few, the ``Unchanged`` count leaves them all
    out): new or gone, or called
    a different number of times per step (by at least one call and 10%), among those
    taking at least ``floor_ns`` per step on one side and called the same number of
    times in every step of each side (``steady_calls``): a runtime's waits and polls
    (XLA's CPU thread pool's ``Wait: pending_threads=2/4``) come and go with scheduling,
    in two runs of one program too. Nested rows new, gone, or called more (or less) often
    together, whose time moved together, are one item, named by the innermost
    (``diff_nesting.items``: a new wrapper, its op and the section it calls were three).
    ``runs``: each side's runs; with several, ``count_*`` is the mean over a side's runs
    and ``steps_*`` every run's steps, so calls per step are ``count * runs / steps``
    (``steady_calls`` holds over every step of every run of the side)."""
    sa = max(int(st.get("steps_a") or 0), 1) / max(runs[0], 1)
    sb = max(int(st.get("steps_b") or 0), 1) / max(runs[1], 1)
    found: list[tuple[float, dict[str, Any], str, str]] = []  # size, row, what, in brackets after it
    for t, df in tables.items():
        for i, (ca, cb, a, b, steady) in enumerate(zip(
                column(df, "count_a").tolist(), column(df, "count_b").tolist(), column(df, "step_mean_ns_a").tolist(),
                column(df, "step_mean_ns_b").tolist(), column(df, "steady_calls").tolist())):
            if max(a, b) < floor_ns or not steady:
                continue
            pa, pb = ca / sa, cb / sb
            if (ca == 0) != (cb == 0):
                kind = "new" if ca == 0 else "gone"
                found.append((max(a, b), _row(df, t, i, kind), kind, f"{fmt_ns(max(a, b))} per step"))
            elif abs(pb - pa) >= 1 and abs(pb - pa) >= 0.1 * max(pa, pb):
                found.append((abs(b - a), _row(df, t, i, "more" if pb > pa else "fewer"),
                              f"{pa:.3g} -> {pb:.3g} calls per step", ""))
    found.sort(key=lambda x: -x[0])
    what = {(r["table"], r["name"]): (w, per) for _, r, w, per in found}
    shown = items([r for _, r, _, _ in found], nest)
    short = short_names([r["name"] for r in shown] + [n["name"] for r in shown for n in r["nested"]])
    how = {"new": "came with it", "gone": "went with it", "more": "are called more often with it",
           "fewer": "are called less often with it"}
    out = []
    for r in shown:
        w, per = what[(r["table"], r["name"])]
        said = "; ".join(filter(None, (per, _nested(r["nested"], short, how[r["change"]])[2:])))
        out.append(f"{label(r['table'], r['kind'])} {short[r['name']]} {w}" + (f" ({said})" if said else ""))
    return out, set(what)


def sign_notes(tables: dict[str, Any], ov: dict[str, Any]) -> list[str]:
    """A note where rows changed one way in total and the other per step (different
    numbers of steps, or time outside the analysed steps), naming the largest."""
    rows = []
    for t, df in tables.items():
        if t in (ov.get("not_compared") or {}):
            continue
        total, step = column(df, "delta_total_ns").astype(np.float64), column(df, "step_delta_ns").astype(np.float64)
        for i in np.flatnonzero((np.sign(total) * np.sign(np.nan_to_num(step))) < 0).tolist():
            rows.append((abs(total[i]), f"{label(t, _kind(df, t, i))} {str(column(df, 'name')[i])[:60]}"))
    if not rows:
        return []
    per = {s: ov[s].get("steps_per_trace") or [ov[s]["steps"] // max(ov[s]["traces"], 1)] * 2 for s in ("a", "b")}
    alike = per["a"][0] == per["a"][1] == per["b"][0] == per["b"][1]  # (runs of 20, 12 and 40 steps: "B 23")
    why = (f"A has {steps_words(per['a'])} steps a trace and B {steps_words(per['b'])}: the totals add them up, "
           "the per-step figures average them" if not alike else
           "their time outside the analysed steps (counted in the totals, not per step) changed the other way")
    name = max(rows)[1]
    return [f"Note: {len(rows)} row(s) changed one way in total and the other per step ({name}"
            f"{' and others' if len(rows) > 1 else ''}): {why}."]


def _p(p: float | None) -> str:
    """", p=0.012" where the step times were tested; nothing where no test ran (one step
    or trace a side: the verdict's next line says why)."""
    return "" if p is None or p != p else f", p={p:.2g}"
