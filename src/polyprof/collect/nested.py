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


def begin(inner: "Session", outer: "Session") -> None:
    from .recorder import section  # a nested session only: the outer session's recorder

    log.info("a session opened inside the running one nests in it (host data only)")
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
    if inner.ended_by is not None:  # the program execs or calls os._exit (collect/exits.py)
        meta[mkeys.SESSION]["ended_by"] = inner.ended_by  # type: ignore[index]
        meta[mkeys.WARNINGS] = [{"plugin": "session", "message": exits.ended_note(inner.ended_by)}]
    host = _host(outer)
    if host is None:
        meta[mkeys.PLUGINS] = {}
        return TraceBuilder(meta).build()
    h = records(host.recorder, ctx.start_ns, stop, getattr(host, "sampler", None), since_ns=ctx.start_ns)
    trace = hosttrace.build(h, meta)
    trace.metadata.update(meta)
    return trace
