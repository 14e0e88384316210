"""What the JAX plugin (plugins/jax.py) makes of the XSpaces JAX's profiler wrote: one per
recording (the session's, or one per stretch a time window or a schedule recorded: the
plugin pauses JAX's profiler between them), each moved onto the session clock by its
own clock markers, its thread lines named, the markers dropped, then all merged into the
plugin's part.

Clock: JAX (TSL) stores times in the XSpace as ns since the profile start, whose
wall-clock time is recorded in the file; polyprof's clock is CLOCK_MONOTONIC. At each
start and stop the plugin brackets a TraceMe annotation between two ``perf_counter_ns()``
reads (:meth:`Recording.mark`): each bracket bounds the offset between the two clocks,
and the bounds give the offset and its uncertainty (``metadata["clock_sync"]``). Should
the markers be missing, the session's wall anchor and the profile start time are used.

Threads: JAX numbers its threads by a hash of its own (the same in every recording of a
process) and names the main one after the process: the line holding the markers made
on a thread gets that thread's OS id and name (``MainThread (jax)``), in every
recording, so its JAX calls are the same thread as the program's sections, marks and
torch ops there (``derive.memo.threads``). A recording started from a window's timer
thread has no marker on the program's thread: the warm-up's (markers made on the
program's thread at its first JAX call, nothing else kept) name that line.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..collect.clock import now_ns
from ..collect.plugin import SessionContext
from ..errors import PluginError
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.sorting import unique
from ..trace.stats import StatColumn, StatTable

SYNC = "polyprof.clock_sync"
_XSPACE_KEYS = ("hostnames", "errors", "warnings", "profile_start_time_ns", "profile_stop_time_ns")


@dataclass
class Recording:
    """One run of JAX's profiler for polyprof: the directory it writes to, its clock
    brackets (name, monotonic ns before, after) and the threads that made them ("start"
    / "stop": OS thread id, name), and when it ran on the session clock: from before
    JAX's start was called to when its stop was (``ended_ns``; -1 while it runs). JAX's
    stop halts its tracers within milliseconds, then writes the XSpace (which may take
    seconds: not counted). ``warm``: the warm-up, whose markers only name the program's
    thread."""

    logdir: Path
    warm: bool = False
    brackets: list[tuple[str, int, int]] = field(default_factory=list)
    threads: dict[str, tuple[int, str]] = field(default_factory=dict)
    began_ns: int = -1
    ended_ns: int = -1

    def mark(self, jp: Any, tag: str) -> None:
        """TraceMes named ``polyprof.clock_sync.<tag>.<i>``, each between two monotonic
        reads, on the calling thread (noted)."""
        for i in range(3):
            name = f"{SYNC}.{tag}.{i}"
            a = now_ns()
            with jp.TraceAnnotation(name):
                pass
            b = now_ns()
            self.brackets.append((name, a, b))
        self.threads[tag] = threading.get_native_id(), threading.current_thread().name

    def xplane(self) -> Path | None:
        """The XSpace JAX wrote for it (the newest, should there be several), or None."""
        files = sorted(self.logdir.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        return files[-1] if files else None


def ingest(recordings: list[Recording], ctx: SessionContext, warn: Callable[[str], None],
           kept: bool, yielded: str) -> Trace:
    """The plugin's part from its recordings (warm-up included: it only names threads);
    ``kept``: the XSpaces stay where they are (``keep_logdir``: their paths go into the
    metadata); ``yielded``: why the program's own trace ended polyprof's ("" if not)."""
    from ..formats import xspace  # at collect only: every session's discovery imports the plugin
    from ..trace.merge import merge  # (the same reason)

    parts: list[Trace] = []
    syncs: list[dict[str, Any]] = []
    files: list[str] = []
    lines: dict[int, tuple[int, str]] = {}  # JAX's line id -> (OS thread id, name)
    for rec in recordings:
        path = rec.xplane()
        if path is None:
            if not rec.warm:
                warn(f"jax.profiler wrote no .xplane.pb under {rec.logdir}: that recording is lost")
            continue
        trace = xspace.load(path)
        lines.update(_marked_lines(trace, rec))
        if rec.warm:
            continue
        syncs.append(_align(trace, rec.brackets, ctx, warn))
        files.append(str(path))
        parts.append(trace)
    if not parts:
        raise PluginError(f"jax.profiler wrote no .xplane.pb under {recordings[0].logdir}")
    meta = _metadata(parts, recordings, syncs, files if kept else [], yielded, warn)
    for trace in parts:
        _name_lines(trace, lines)
    parts = [_without_rows(t, drop) if (drop := _named(t, SYNC)).any() else t for t in parts]
    for t in parts:  # the file-level metadata would override the session's
        t.metadata = {}
    out = parts[0] if len(parts) == 1 else merge(parts)
    out.metadata = meta
    return out


def _metadata(parts: list[Trace], recordings: list[Recording], syncs: list[dict[str, Any]], files: list[str],
              yielded: str, warn: Callable[[str], None]) -> dict[str, Any]:
    """The part's metadata: the XSpaces' facts (not their file-level keys, which would
    override the session's), the clock fit of each plane, when polyprof's JAX recording
    ran (``recorded_ns``, session clock), the kept files and the hand-over."""
    spaces = [dict(t.metadata.get(mkeys.XSPACE, {})) for t in parts]
    xs = {k: spaces[0][k] for k in _XSPACE_KEYS if k in spaces[0]}
    for k in ("errors", "warnings"):
        if any(k in s for s in spaces):
            xs[k] = [e for s in spaces for e in s.get(k, [])]
    if "profile_stop_time_ns" in spaces[-1]:
        xs["profile_stop_time_ns"] = spaces[-1]["profile_stop_time_ns"]
    jax: dict[str, Any] = {"xspace": xs, "recorded_ns": [[r.began_ns, r.ended_ns] for r in recordings
                                                          if not r.warm]}
    env = next((p for p in parts[0].planes if p.name == "Task Environment"), None)
    if env is not None:
        jax["task_environment"] = {k: v for k, v in env.properties.items() if not isinstance(v, bytes)}
    if files:
        jax["xplane"] = files[0]
        if len(files) > 1:
            jax["xplanes"] = files
    if yielded:
        jax["program_trace"] = yielded
    for err in xs.get("errors", []):
        warn(f"jax.profiler: {err}")
    sync = syncs[0] if len(syncs) == 1 else _joined(syncs)
    fit = {**sync, "bound_ns": sync.get("bound_ns", math.inf if sync.get("uncertainty_ns") is None
                                        else float(sync["uncertainty_ns"]))}
    meta: dict[str, Any] = {mkeys.CLOCK_SYNC: {}, mkeys.JAX: jax}
    for plane in {p.name for t in parts for p in t.planes}:  # the XSpace's clock, mapped onto the session's
        mkeys.record_fit(meta, plane, "jax", fit)
    return meta


def _joined(syncs: list[dict[str, Any]]) -> dict[str, Any]:
    """One fit for several recordings: the worst bound of theirs, each one's kept."""
    methods = sorted({str(s.get("method")) for s in syncs})
    bounds = [int(b) for s in syncs if (b := s.get("uncertainty_ns")) is not None]
    out: dict[str, Any] = {"method": methods[0] if len(methods) == 1 else "mixed",
                           "uncertainty_ns": max(bounds) if len(bounds) == len(syncs) else None,
                           "recordings": syncs}
    if out["uncertainty_ns"] is not None:
        out["bound_ns"] = float(max(float(s.get("bound_ns", s["uncertainty_ns"])) for s in syncs))
    return out


def _align(trace: Trace, brackets: list[tuple[str, int, int]], ctx: SessionContext,
           warn: Callable[[str], None]) -> dict[str, Any]:
    """Move the XSpace's times onto the session clock; returns how it was done."""
    from ..trace import clock  # at collect only (the same reason as ingest's)

    names = trace.names() if trace.n_events else np.zeros(0, object)
    start, end = trace.start_ns, trace.end_ns
    # a marker inside the bracket [a, b]: its start maps to >= a, its end to <= b
    lo_o: list[int] = []
    lo_h: list[int] = []
    hi_o: list[int] = []
    hi_h: list[int] = []
    for name, a, b in brackets:
        rows = np.flatnonzero(names == name)
        if len(rows) == 1:
            r = rows[0]
            lo_o.append(int(start[r]))
            lo_h.append(a)
            hi_o.append(int(end[r]))
            hi_h.append(b)
    wall0 = trace.metadata.get(mkeys.XSPACE, {}).get("profile_start_time_ns")
    anchor = ctx.wall_anchor
    wall_offset = None
    if wall0 is not None:  # xspace t=0 is wall time wall0; mono = wall - (wall_ns - mono_ns)
        wall_offset = int(wall0) - (anchor["wall_ns"] - anchor["mono_ns"])
    info: dict[str, Any] = {"xspace_clock": trace.metadata.get(mkeys.CLOCK_NAME, "")}
    fit = None
    if lo_o:  # XProf's times are wall-clock based: the host's rate, an offset unless stepped
        fit = clock.fit_bounds(lo_o, lo_h, hi_o, hi_h, max_drift_ppm=0.0, method="traceme_bracket", warn=False)
        if not fit.consistent:
            fit = clock.fit_bounds(lo_o, lo_h, hi_o, hi_h, method="traceme_bracket_drift")
    if fit is not None and fit.consistent:
        info.update(fit.to_dict(), uncertainty_ns=int(math.ceil(fit.bound_ns)), brackets=len(lo_o))
        if wall_offset is not None:  # how far the wall-clock route would have been off
            info["wall_route_error_ns"] = wall_offset - fit.offset_ns
    elif wall_offset is not None:
        fit = clock.constant(wall_offset, int(anchor.get("uncertainty_ns", 0)) + 1_000_000, "wall_anchor")
        info.update(fit.to_dict(), uncertainty_ns=int(fit.bound_ns))
        warn("clock-sync markers missing from the JAX profile; aligned by wall clock (about 1 ms uncertainty)")
    else:
        fit = None
        info.update(method="none", offset_ns=0, uncertainty_ns=None)
        warn("the JAX profile has no start time: its times are not aligned")
    if fit is not None:
        clock.retime(trace, fit, record=False)
    return info


def _marked_lines(trace: Trace, rec: Recording) -> dict[int, tuple[int, str]]:
    """JAX's id of the thread line holding each tag's markers -> that thread's OS id and
    ``<name> (jax)``."""
    out: dict[int, tuple[int, str]] = {}
    for tag, (tid, name) in rec.threads.items():
        lines = unique(trace.events["track"][_named(trace, f"{SYNC}.{tag}.")])
        if len(lines) == 1 and trace.tracks[int(lines[0])].kind == "thread":
            out[int(trace.tracks[int(lines[0])].tid)] = tid, f"{name} (jax)"
    return out


def _name_lines(trace: Trace, lines: dict[int, tuple[int, str]]) -> None:
    """The thread lines of ``lines`` named (one per track, not per event)."""
    for track in trace.tracks:
        if track.kind == "thread" and int(track.tid) in lines:
            track.tid, track.name = lines[int(track.tid)]


def _named(trace: Trace, prefix: str) -> np.ndarray:
    """Per event, whether its name starts with ``prefix`` (tested once per distinct name)."""
    hit = np.fromiter((s.startswith(prefix) for s in trace.strings), bool, len(trace.strings))
    return hit[trace.events["name"]] if len(hit) else np.zeros(trace.n_events, bool)


def _without_rows(trace: Trace, drop: np.ndarray) -> Trace:
    """``trace`` minus the events where ``drop`` is True (stats and flows follow), and
    minus the thread lines that held nothing else (a window's timer thread, which made
    a recording's markers only)."""
    keep = ~drop
    new_index = np.cumsum(keep) - 1
    events = {k: v[keep] for k, v in trace.events.items()}
    n_tracks = len(trace.tracks)
    gone = (np.bincount(trace.events["track"][drop], minlength=n_tracks) > 0) & \
        (np.bincount(events["track"], minlength=n_tracks) == 0)
    tracks = trace.tracks
    if gone.any():
        tracks = [t for t, g in zip(trace.tracks, gone.tolist()) if not g]
        for i, t in enumerate(tracks):
            t.id = i
        events["track"] = ((np.cumsum(~gone) - 1)[events["track"]]).astype(events["track"].dtype)
    stats = {}
    for key, col in trace.stats.items():
        m = keep[col.rows]
        if m.any():
            stats[key] = StatColumn(new_index[col.rows[m]], col.values[m])
    fl = trace.flows
    fm = keep[fl["src"]] & keep[fl["dst"]] if len(fl["src"]) else np.zeros(0, bool)
    flows = {"src": new_index[fl["src"][fm]], "dst": new_index[fl["dst"][fm]], "id": fl["id"][fm],
             "category": fl["category"][fm]}
    return Trace(trace.strings, trace.planes, tracks, events, StatTable(stats), flows, trace.counters,
                 trace.metadata).validate()
