"""The verdict of a diff in words: a headline, the step time, what got slower and
faster, what did not change (``analyze/diff.py`` computes, this says it)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..trace.categories import is_collective_name
from .frames import column
from .inputs import CPU_PREFIXES

LABELS = {"kernels": "kernel", "ops": "op", "sections": "section"}


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


def _item(c: dict[str, Any], fmt_ns: Callable[[float], str], name: str) -> str:
    """A changed row: its mean per step (over the ranks), and the rank whose own test
    called it with that rank's change."""
    a, b = c["step_mean_ns_a"], c["step_mean_ns_b"]
    rel = (b - a) / a if a > 0 else float("nan")
    where = ""
    if c.get("rank_decided", -1) >= 0:
        ra, rb = c["rank_step_mean_ns_a"], c["rank_step_mean_ns_b"]
        where = (f"; on rank {c['rank_decided']}: {fmt_ns(ra)} -> {fmt_ns(rb)}, "
                 f"{_pct((rb - ra) / ra if ra > 0 else float('nan'))}")
    return (f"{LABELS[c['table']]} {name} {fmt_ns(a)} -> {fmt_ns(b)} per step ({_pct(rel)}, "
            f"p={c['p_adjusted']:.2g}{where})")


def verdict_lines(tables: dict[str, Any], st: dict[str, Any], changes: list[dict[str, Any]], ov: dict[str, Any],
                  top: int, fmt_ns: Callable[[float], str]) -> list[str]:
    """A headline, then the step time, what got slower, what got faster, what did not
    change; times written by ``fmt_ns``."""
    reason = ov["untestable"]
    floor = f"{100 * ov['rel_floor']:g}% and {fmt_ns(ov['abs_floor_ns'])} per step"
    unit = st.get("unit", "step")
    step_changed = bool(st.get("change"))
    lines = []
    if reason is not None:
        lines.append("Not tested: no change can be called significant.")
    elif not changes and not step_changed:
        lines.append(f"No significant change (alpha {ov['alpha']:g}, {ov['correction']}-corrected across "
                     f"{ov['rows_tested']} rows; changes under {floor} are not called changes).")
    else:
        slower = sum(c["change"] == "slower" for c in changes)
        counts = f"{slower} row(s) slower, {len(changes) - slower} faster"
        if step_changed:
            lines.append(f"B is {st['change']}: median {unit} time {_pct(st['median_rel_change'])} (mean "
                         f"{_pct(st['rel_change'])}); {counts}.")
        else:
            lines.append(f"Changes in B: {counts}; {unit} time unchanged.")
    if st["steps_a"] and st["steps_b"] and st["mean_ns_a"] == st["mean_ns_a"]:
        lines += _step_lines(st, floor, reason is None, not changes, fmt_ns)
    if reason is not None:
        lines.append(f"No change is called significant: {reason}.")
        return lines + _largest(tables, unit, top, fmt_ns)
    names = short_names([c["name"] for c in changes])
    for direction in ("slower", "faster"):
        sel = [c for c in changes if c["change"] == direction]
        if sel:
            more = f" (and {len(sel) - top} more)" if len(sel) > top else ""
            lines.append(f"{direction.capitalize()} in B ({len(sel)}): " +
                         "; ".join(_item(c, fmt_ns, names[c["name"]]) for c in sel[:top]) + more + ".")
    total = sum(len(df) for df in tables.values())
    floored = sum(int((column(df, "reason") == "below the effect floor").sum()) for df in tables.values())
    lines.append(f"Unchanged: {total - len(changes)} of {total} kernels, ops and sections"
                 + (f" ({floored} beyond the noise but under {floor})" if floored else "")
                 + f"; test: {ov['test']}, {ov['correction']}-adjusted across {ov['rows_tested']} rows tested, "
                   f"alpha {ov['alpha']:g}.")
    if max(ov["a"]["runs"], 1) == 1 and max(ov["b"]["runs"], 1) == 1 and ov["samples"] == "steps":
        along = [c for c in changes if c["change"] == st.get("change")]
        other = _other_work(tables, st, ov["abs_floor_ns"], fmt_ns)
        if other:
            lines.append(f"B runs other work: {'; '.join(other[:top])}. A change of the machine or of its "
                         "load does not add, drop or repeat calls: the program changed.")
        elif st.get("change") and len(along) >= 3 and len(along) == len(changes):
            lines.append(f"The step time and every changed row moved together ({st['change']}): that is what a "
                         "change of the machine or of its load looks like (another node, other work beside it) "
                         "as much as a change of the program; several runs a side tell them apart "
                         "(polyprof diff A1 A2 -- B1 B2).")
        else:
            lines.append("One run a side: the noise is step-to-step only; run-to-run variance is tested when each "
                         "side has several runs (polyprof diff A1 A2 -- B1 B2).")
    return lines


def _step_lines(st: dict[str, Any], floor: str, tested: bool, no_row: bool,
                fmt_ns: Callable[[float], str]) -> list[str]:
    """The step time: its median and mean per step, the test and what it says; the stalls
    that moved its mean; where it is called changed and no row is, that no row's typical
    step holds the change."""
    unit = st.get("unit", "step")
    what = ("not tested" if not tested or st["significant"] is None else
            {"slower": "B is slower", "faster": "B is faster"}.get(st["change"], "no significant change"))
    if tested and not st["change"] and st.get("reason") == "below the effect floor":
        what = f"no significant change (beyond the noise, under {floor} at the median)"
    out = st.get("stalls_out", 0)
    test = {"rank": "Mann-Whitney U", "t": "t on log times"}.get(st.get("test", ""), "")
    test = f" ({test}{f', {out} stall(s) left out' if out else ''})" if test and _p(st["p_value"]) else ""
    several = max(st["steps_a"], st["steps_b"]) > 1  # else the median is the mean is the one sample
    mean = f"; mean {fmt_ns(st['mean_ns_a'])} -> {fmt_ns(st['mean_ns_b'])} ({_pct(st['rel_change'])})"
    lines = [f"{unit.capitalize()} time: {'median ' if several else ''}{fmt_ns(st['median_ns_a'])} -> "
             f"{fmt_ns(st['median_ns_b'])} per {unit} ({_pct(st['median_rel_change'])}){mean if several else ''}"
             f"{_p(st['p_value'])}{test}; {st['steps_a']} vs {st['steps_b']} {unit}s: {what}."]
    if st["change"] and tested and no_row:
        lines.append(f"No kernel, op or section is called changed: the {unit} time's change is in no row's typical "
                     f"{unit} (time between them, or many rows each under the floors).")
    return lines + _stalls(st, unit, fmt_ns)


def _largest(tables: dict[str, Any], unit: str, top: int, fmt_ns: Callable[[float], str]) -> list[str]:
    """Where nothing could be tested: the rows whose time per step (the sample) moved
    most, marked untested; rows that did not move are left out."""
    rows = []
    for t, df in tables.items():
        a = column(df, "step_mean_ns_a").astype(np.float64)
        b = column(df, "step_mean_ns_b").astype(np.float64)
        delta = np.nan_to_num(b - a)
        for i in np.flatnonzero(delta != 0)[np.argsort(-np.abs(delta[delta != 0]), kind="stable")][:top].tolist():
            rows.append((abs(delta[i]), t, str(column(df, "name")[i]), a[i], b[i]))
    rows.sort(key=lambda x: -x[0])
    if not rows:
        return [f"Every row takes the same time per {unit} in A and B."]
    names = short_names([r[2] for r in rows[:top]])
    return [f"Largest differences per {unit} (not tested): " + "; ".join(
        f"{LABELS[t]} {names[name]} {fmt_ns(a)} -> {fmt_ns(b)} ({_pct((b - a) / a if a > 0 else float('nan'))})"
        for _, t, name, a, b in rows[:top]) + "."]


#: a step this many times its side's median step is a stall (as a long first step is set-up)
STALL = 5.0


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
                fmt_ns: Callable[[float], str]) -> list[str]:
    """Rows only a change of the program makes, largest first: new or gone, or called
    a different number of times per step (by at least one call and 10%), among those
    taking at least ``floor_ns`` per step on one side and called the same number of
    times in every step of each side (``steady_calls``): a runtime's waits and polls
    (XLA's CPU thread pool's ``Wait: pending_threads=2/4``) come and go with scheduling,
    in two runs of one program too."""
    sa, sb = max(int(st.get("steps_a") or 0), 1), max(int(st.get("steps_b") or 0), 1)
    found: list[tuple[float, str, str, str]] = []  # size, table, name, what
    for t, df in tables.items():
        for name, ca, cb, a, b, steady in zip(
                column(df, "name").tolist(), column(df, "count_a").tolist(), column(df, "count_b").tolist(),
                column(df, "step_mean_ns_a").tolist(), column(df, "step_mean_ns_b").tolist(),
                column(df, "steady_calls").tolist()):
            if max(a, b) < floor_ns or not steady:
                continue
            pa, pb = ca / sa, cb / sb
            if (ca == 0) != (cb == 0):
                found.append((max(a, b), t, str(name), f"{'new' if ca == 0 else 'gone'} ({fmt_ns(max(a, b))} per step)"))
            elif abs(pb - pa) >= 1 and abs(pb - pa) >= 0.1 * max(pa, pb):
                found.append((abs(b - a), t, str(name), f"{pa:.3g} -> {pb:.3g} calls per step"))
    short = short_names([f[2] for f in found])
    return [f"{LABELS[t]} {short[name]} {what}" for _, t, name, what in sorted(found, key=lambda x: -x[0])]


def ranks_apart(per_rank: dict[str, tuple[list[str], np.ndarray | None, np.ndarray | None]], strata: list[int],
                tables: dict[str, Any], st: dict[str, Any], floors: tuple[float, float],
                fmt_ns: Callable[[float], str], top: int = 3) -> list[str]:
    """Collectives whose time moved apart between the ranks: on some rank it grew by the
    effect floors, on the rank that spends least in it (the last to arrive, whom the
    others wait for) it did not. Said only where a test stands behind it: the row is called
    changed that way on the rank whose time grew, or the step time is, by at least the
    relative floor of a step. ``per_rank``: per table, its names and (rows x ranks) each
    rank's mean per step in A and in B."""
    rel_floor = floors[0]
    called = st.get("change") if st.get("mean_ns_a") == st.get("mean_ns_a") else ""
    step_a = float(st.get("mean_ns_a") or 0.0)
    found: list[tuple[float, str]] = []
    for t, (names, ma, mb) in per_rank.items():
        if ma is None or mb is None:
            continue
        df = tables[t]
        kinds = column(df, "kind").tolist() if t == "kernels" else [""] * len(df)
        rows = dict(zip(column(df, "name").tolist(), zip(kinds, column(df, "change").tolist(),
                                                          column(df, "rank_decided").tolist())))
        for i, name in enumerate(names):
            kind, change, decided = rows[name]
            if not (kind == "communication" or is_collective_name(name) or name.lower().startswith(CPU_PREFIXES)):
                continue
            for way, up in (("slower", mb[i] - ma[i]), ("faster", ma[i] - mb[i])):
                text = _apart(names[i], t, way, ma[i], mb[i], strata, floors, fmt_ns)
                if text and (change == way and decided == strata[int(np.argmax(up))]
                             or called == way and np.max(up) >= rel_floor * step_a):
                    found.append((float(np.max(up)), text))
    return [text for _, text in sorted(found, key=lambda x: -x[0])[:top]]


def _apart(name: str, table: str, way: str, ma: np.ndarray, mb: np.ndarray, strata: list[int],
           floors: tuple[float, float], fmt_ns: Callable[[float], str]) -> str:
    """The line of one collective whose ranks moved apart, B being ``way`` (else ""): the
    ranks whose time in it moved that way by the floors, while the rank that spends
    least in it in the slower run (the last to arrive) did not, or moved the other way."""
    if len(strata) < 2 or np.isnan(ma).any() or np.isnan(mb).any():
        return ""
    up, slow = (mb - ma, mb) if way == "slower" else (ma - mb, ma)
    big = (np.abs(mb - ma) >= floors[1]) & (np.abs(mb - ma) >= floors[0] * ma)
    u, s = int(np.argmax(up)), int(np.argmin(slow))
    if u == s or not (big[u] and up[u] > 0) or (big[s] and up[s] > 0):
        return ""
    waiting = np.flatnonzero(big & (up > 0))
    grew = "grew" if way == "slower" else "fell"
    fell = "did not move" if not big[s] else "fell" if way == "slower" else "grew"

    def move(i: int) -> str:
        return f"{fmt_ns(ma[i])} -> {fmt_ns(mb[i])}"

    who = (f"rank {strata[u]}'s time in it {grew} ({move(u)} per step)" if len(waiting) == 1 else
           f"{len(waiting)} ranks' time in it {grew} (most rank {strata[u]}'s: {move(u)} per step)")
    wait = (f"rank {strata[u]}" if len(waiting) == 1 else "they") + (" waits" if len(waiting) == 1 else " wait")
    wait = f"{wait} for rank {strata[s]} in B" if way == "slower" else \
        f"{wait.replace(' waits', ' waited').replace(' wait', ' waited')} for rank {strata[s]} in A"
    return (f"Ranks apart in {LABELS[table]} {name[:60]}, a collective: {who} while rank {strata[s]}'s {fell} "
            f"({move(s)}); the last rank to arrive waits least: {wait}?")


def sign_notes(tables: dict[str, Any], ov: dict[str, Any]) -> list[str]:
    """A note where rows changed one way in total and the other per step (different
    numbers of steps, or time outside the analysed steps), naming the largest."""
    rows = []
    for t, df in tables.items():
        total, step = column(df, "delta_total_ns").astype(np.float64), column(df, "step_delta_ns").astype(np.float64)
        for i in np.flatnonzero((np.sign(total) * np.sign(np.nan_to_num(step))) < 0).tolist():
            rows.append((abs(total[i]), f"{LABELS[t]} {str(column(df, 'name')[i])[:60]}"))
    if not rows:
        return []
    per = {s: ov[s]["steps"] / max(ov[s]["traces"], 1) for s in ("a", "b")}
    why = (f"A has {per['a']:.3g} steps a trace and B {per['b']:.3g}: the totals add them up, the per-step "
           "figures average them" if per["a"] != per["b"] else
           "their time outside the analysed steps (counted in the totals, not per step) changed the other way")
    name = max(rows)[1]
    return [f"Note: {len(rows)} row(s) changed one way in total and the other per step ({name}"
            f"{' and others' if len(rows) > 1 else ''}): {why}."]


def _p(p: float | None) -> str:
    """", p=0.012" where the step times were tested; nothing where no test ran (one step
    or trace a side: the verdict's next line says why)."""
    return "" if p is None or p != p else f", p={p:.2g}"
