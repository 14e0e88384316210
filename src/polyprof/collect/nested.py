"""A session opened while another one runs: it nests instead of failing.

The typical case is ``polyprof run script.py`` where the script itself does
``with polyprof.profile() as prof:`` (the README's pattern). Plugins start once per
process, so the inner session starts none: it opens a section named
``polyprof.profile`` in the outer session (so the outer trace shows where the
inner one ran) and, when it stops, its trace is the outer host plugin's records in
its time window (sections, marks, counters, steps, process samples). Device data
arrives only when the outer session collects, so it is in the outer trace, not in
the inner one; the inner trace's metadata says so (``nested_in``). The inner
session writes its own ``output`` if it has one, and no crash journal (the outer's
journal covers the same records).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from . import exits
from .clock import REFERENCE_CLOCK, now_ns
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    from ..plugins.host import HostPlugin
    from .session import Session

log = logging.getLogger("polyprof")
SECTION_NAME = "polyprof.profile"


def _host(outer: "Session") -> HostPlugin | None:
    from ..plugins.host import HostPlugin  # a nested session only: the outer session's host plugin

    for slot in outer._slots:
        if slot.name == "host" and slot.started and isinstance(slot.plugin, HostPlugin):
            return slot.plugin
    return None


#: how long a session started on another thread waits for the one it nests in to start
#: (a device plugin's start can take seconds: torch.profiler's 3.8 s)
START_WAIT_S = 60.0


def wait_started(outer: "Session") -> None:
    """Wait until ``outer`` (being started on another thread) has started: what the
    nested session records goes to its recorder, which is not on before."""
    if not outer._ready.wait(START_WAIT_S):
        log.warning("a session started on another thread has not finished starting after %.0f s; "
                    "this one nests in it and may miss what runs before it has", START_WAIT_S)


def begin(inner: "Session", outer: "Session") -> None:
    from .recorder import section  # a nested session only: the outer session's recorder

    log.info("a session opened inside the running one nests in it (host data only)")
    running = {s.name for s in outer._slots if s.started}
    asked = [p for p in inner.plugin_spec or () if isinstance(p, str)]
    dropped = [p for p in asked if p not in running]
    inner._nested_notes = []  # type: ignore[attr-defined]
    if dropped:
        note = (f"plugins {', '.join(dropped)} not run: this session nests in one already running "
                f"({', '.join(sorted(running)) or 'no plugins'}), which records for both; an earlier "
                f"session that was never stopped (a notebook cell that raised, say) is still active")
        log.warning("%s", note)
        inner._nested_notes.append({"plugin": "session", "message": note})  # type: ignore[attr-defined]
    inner._nested_section = section(SECTION_NAME)  # type: ignore[attr-defined]
    inner._nested_section.__enter__()  # type: ignore[attr-defined]


def end(inner: "Session", outer: "Session") -> Trace:
    from ..formats import hostrecords as hosttrace  # a nested session only: its host data as a Trace
    from ..plugins.host import records  # a nested session only: the outer host plugin's records

    stop = now_ns()  # before the marker section closes: it belongs to the outer trace only
    sec = getattr(inner, "_nested_section", None)
    if sec is not None:
        sec.__exit__(None, None, None)
    ctx = inner._ctx
    assert ctx is not None
    meta: dict[str, object] = {
        mkeys.CLOCK_NAME: REFERENCE_CLOCK,
        mkeys.SESSION: {"start_ns": ctx.start_ns, "stop_ns": stop, **inner._info()},
        mkeys.WALL_ANCHOR: ctx.wall_anchor,
        mkeys.NESTED_IN: {"start_ns": outer._ctx.start_ns if outer._ctx else None,
                      "note": "host data only; device plugins' data is in the outer session's trace"},
        mkeys.PLUGINS: {"host": "ok"}, mkeys.PLUGIN_ERRORS: [], mkeys.WARNINGS: [],
    }
    warnings: list[dict[str, str]] = list(getattr(inner, "_nested_notes", []))
    if inner.ended_by is not None:  # the program execs or calls os._exit (collect/exits.py)
        meta[mkeys.SESSION]["ended_by"] = inner.ended_by  # type: ignore[index]
        warnings.append({"plugin": "session", "message": exits.ended_note(inner.ended_by)})
    if outer._stop_ns is not None and outer._stop_ns < stop:  # its recorder stopped with it
        note = (f"the session this one nested in stopped {(stop - outer._stop_ns) / 1e6:.1f} ms before this "
                f"one: what ran after it is not recorded (two sessions running at once, as two "
                f"asyncio tasks or threads, nest; the first to start records for both)")
        log.warning("%s", note)
        warnings.append({"plugin": "session", "message": note})
    meta[mkeys.WARNINGS] = warnings
    host = _host(outer)
    if host is None:
        meta[mkeys.PLUGINS] = {}
        return TraceBuilder(meta).build()
    h = records(host.recorder, ctx.start_ns, stop, getattr(host, "sampler", None), since_ns=ctx.start_ns)
    trace = hosttrace.build(h, meta)
    trace.metadata.update(meta)
    return trace
