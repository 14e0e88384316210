"""What the two sides of a diff hold, said before anything is compared
(``analyze/diff.py`` collects, this judges and words it):

* the tables that cannot be compared (:func:`not_compared`): a table one side has
  nothing in (no framework op at all: recorded without the torch plugin, or read from a
  format whose ops polyprof does not classify), or every table where the sides share no
  row (two programs). Before, a run recorded with ``--plugins host`` against the same
  program recorded with torch read "B is faster ... op aten::mm gone ... the program
  changed", and JAX's own Chrome trace against its XSpace called every XLA op gone;
* each side's analysed window where its traces' differ (:func:`window_words`) and its
  steps a trace as a range (:func:`steps_words`): with runs of 20, 12 and 40 steps the
  header named the first run's window and a note "B 23 steps a trace", their mean;
* a side whose runs are the ranks of one job (:func:`ranks_as_runs`), refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PolyprofError
from .units import number_ranges

#: the ``reason`` of a row of a table not compared (:func:`not_compared`), before its why
NOT_COMPARED = "not compared"
#: a table's rows, in words
WORDS = {"kernels": "device activity", "ops": "framework ops", "sections": "sections"}
#: windows named in a side's header where its traces' differ, at most
NAMED = 3


def not_compared(counts: dict[str, tuple[np.ndarray, np.ndarray]],
                 recorded: dict[str, list[str]]) -> dict[str, str]:
    """The tables whose rows are not compared, each with why (the rows' ``reason``):
    ``counts`` per table, the calls of each row in A and in B; ``recorded``, per side,
    how its traces were recorded (:func:`recorded_by`). A table one side has no call in
    and the other has, where the sides were recorded differently (other plugins, another
    format): its rows would all read new or gone, whatever the program did. (Recorded
    alike, such a table is the program's: a first section, B's new ``mm_block``, is new.)
    Where no row has calls on both sides (and both have some), every table: nothing in A
    is the same work by name as anything in B."""
    held = {t: (bool((a > 0).any()), bool((b > 0).any())) for t, (a, b) in counts.items()}
    ways = [set(recorded.get(s) or []) for s in ("a", "b")]
    unlike = bool(ways[0] and ways[1]) and ways[0] != ways[1]
    out = {t: f"{NOT_COMPARED}: {'B' if a else 'A'} has none of this table, recorded otherwise"
           for t, (a, b) in held.items() if a != b and unlike}
    shared = any(bool(((a > 0) & (b > 0)).any()) for a, b in counts.values())
    if not shared and any(a for a, _ in held.values()) and any(b for _, b in held.values()):
        out = {t: f"{NOT_COMPARED}: A and B share no row" for t, (a, b) in held.items() if a or b}
    return out


def lines(counts: dict[str, tuple[np.ndarray, np.ndarray]], apart: dict[str, str],
          recorded: dict[str, list[str]]) -> list[str]:
    """The verdict's words for the tables :func:`not_compared` left out: which side holds
    none of which table, or that the sides share no row, with what recorded each side
    (``recorded``: per side, its traces' plugins or file formats)."""
    if not apart:
        return []
    by = "; ".join(f"{s.upper()} {_recorded(recorded.get(s, []))}" for s in ("a", "b"))
    if all(why.endswith("share no row") for why in apart.values()):
        held = ", ".join(f"{WORDS[t]}: A {_rows(a)}, B {_rows(b)}" for t, (a, b) in counts.items() if t in apart)
        return [f"Not compared: A and B share no row ({held}; none of one is in the other by name): two programs, "
                f"or one recorded in two ways ({by}). No row is compared, nor called new or gone; the step time "
                "is compared alone."]
    parts = []
    for t in apart:
        a, b = counts[t]
        empty, full, rows = ("B", "A", a) if (a > 0).any() else ("A", "B", b)
        parts.append(f"{empty} holds no {WORDS[t]} at all ({full} {_rows(rows)})")
    return [f"Not compared: {'; '.join(parts)}, and the two were recorded differently ({by}): recorded without "
            "the plugin that records them, or read from a format whose events polyprof does not count there, more "
            "likely than a program that runs none. Those rows are left out of the tests, the counts and the other "
            "work below: each would read new or gone, whatever the program did."]


def _rows(calls: np.ndarray) -> str:
    """"12 rows", "1 row": the rows with calls."""
    n = int((calls > 0).sum())
    return f"{n} row{'' if n == 1 else 's'}"


def _recorded(what: list[str]) -> str:
    """A side's recording in words: "by plugins host, torch", "from an xspace file"."""
    if not what:
        return "by what polyprof cannot tell"
    return " and ".join(dict.fromkeys(what))


def recorded_by(plugins: object, source: object) -> str:
    """How one trace was recorded, in words: the plugins that worked (the trace's
    ``plugins`` metadata), else the format of the file it was read from."""
    if isinstance(plugins, dict):
        ok = sorted(str(p) for p, state in plugins.items() if str(state) == "ok")
        if ok:
            return f"by plugins {', '.join(ok)}"
    if isinstance(source, dict) and source.get("format"):
        fmt = str(source["format"])
        return f"from a{'n' if fmt[:1] in 'aeiox' else ''} {fmt} file"
    return ""


def window_words(windows: list[str], analysed: list[str], where: list[str]) -> str:
    """A side's analysed window in words: its traces' one window; where they differ,
    the steps each analyses (``analysed``: "1-11"), traces of the same steps together
    (``where``: "run 2", "run 2, rank 1"), then the first trace's window in full (the
    rest differ in the same words' figures: a warm-up's length; ``windows`` in the
    overview has each)."""
    if not windows:
        return ""
    if len(set(windows)) == 1:
        return windows[0]
    groups: dict[str, list[str]] = {}
    for steps, name in zip(analysed, where):
        groups.setdefault(steps, []).append(name)
    if len(groups) == 1:
        head = f"steps {analysed[0]} in each of {len(windows)} traces"
    else:
        named = [f"{steps} ({_names(names)})" for steps, names in list(groups.items())[:NAMED]]
        more = f" and {len(groups) - NAMED} more" if len(groups) > NAMED else ""
        head = f"steps {', '.join(named)}{more}"
    return f"{head}; {where[0]}: {windows[0]}"


def _names(names: list[str]) -> str:
    """The traces of a group, up to :data:`NAMED`, else how many."""
    return ", ".join(names) if len(names) <= NAMED else f"{len(names)} traces"


def steps_words(per_trace: list[int]) -> str:
    """A side's steps a trace: "29", or "11 to 39" where its traces differ."""
    if not per_trace:
        return "0"
    lo, hi = min(per_trace), max(per_trace)
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def side_info(seen: list[tuple[int, int, str | None, int, int, str, str]], kept: list[bool]) -> dict[str, Any]:
    """A side's ``window`` (:func:`window_words`), ``windows`` (each kept trace's) and
    ``steps_per_trace`` ([fewest, most] of those with steps) from its traces (``seen``: run, rank, path,
    steps, events, window, the steps analysed) that ``kept`` marks."""
    rows = [x for x, k in zip(seen, kept) if k]
    runs = len({x[0] for x in rows}) > 1
    ranks = len({x[1] for x in rows}) > 1
    where = [", ".join(filter(None, (f"run {x[0] + 1}" if runs else "", f"rank {x[1]}" if ranks else "")))
             or "trace" for x in rows]
    steps = [x[3] for x in rows if x[3]] or [0]  # (of the traces with steps)
    return {"window": window_words([x[5] for x in rows], [x[6] for x in rows], where),
            "windows": [x[5] for x in rows], "steps_per_trace": [min(steps), max(steps)]}


def ranks_as_runs(side: str, runs: list[list[Any]]) -> None:
    """Refuse a side whose runs (each a job's ``TraceSet.entries``), one trace each, are
    ranks of one job: each names another rank (its data, Kineto's ``distributedInfo``,
    or a file name that calls the number a rank), as ``fast.rank0 fast.rank1 -- slow.rank0
    slow.rank1`` do. Runs given before and after ``--`` (a ``Runs``) are a side's
    replicates (a run: a file, a directory of its rank files, a store); read so, rank 1
    was taken for a second run of rank 0, and a 25x slower ``aten::mm`` read p=1, "no change", where the two jobs as directories had 8 changes.
    Which files make a job is the user's to say (as ``ranks.sources.several_runs``
    refuses a folder of several runs), so the error says how: a directory of its ranks."""
    if len(runs) < 2 or any(len(r) != 1 for r in runs):
        return
    entries = [r[0] for r in runs]
    ranks = [e.rank for e in entries]
    if len(set(ranks)) != len(ranks) or any(e.how == "order" for e in entries):
        return  # (one-rank runs: each rank 0, or numbered by nothing but the order)
    hows = sorted({"file names" if e.how == "file name" else e.how for e in entries})
    files = ", ".join(str(e.path or e.label) for e in entries)
    raise PolyprofError(
        f"diff: the {len(runs)} runs of side {side.upper()} are ranks {number_ranges(sorted(ranks))} of one job "
        f"(their {', '.join(hows)}): {files}. A side's runs (before and after `--`) are its replicates (each a "
        "trace file, a directory of its rank files or a store); to compare jobs of several ranks, put each job's "
        "rank files in a directory of their own and give the directories (polyprof diff jobA/ jobB/; several runs "
        "of such a job: a directory per run, before and after `--`)")
