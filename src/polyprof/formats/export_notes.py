"""What polyprof's JSON and Perfetto exports carry beside the events for its readers to
take back: the host the trace was recorded on (Kineto's top-level ``host_name``) and the
trace's warnings and plugin errors (Chrome: ``otherData``; Kineto: its ``polyprof`` key;
Perfetto: Chrome metadata entries). Apart from formats/chrome.py, the Chrome writer, so
that a reader of a Kineto or Perfetto file imports none of the writers' modules (gzip,
trace/memory.py: tests/test_import_weight.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    from ..trace.core import Trace

#: Kineto's top-level key for the host the trace was recorded on (recent torch writes it
#: before the events); the Chrome, Kineto and Perfetto exports write it, the readers take
#: it back as the source's host
HOST_NAME = "host_name"


#: the metadata keys the exports carry for the reader to restore (:func:`notes`; and the
#: ``schedule``, a dict: :data:`CARRIED`)
NOTES = (mkeys.WARNINGS, mkeys.PLUGIN_ERRORS)
CARRIED = (*NOTES, mkeys.SCHEDULE)
#: the Perfetto export's Chrome metadata entries that hold them (JSON), by key
PERFETTO_NOTES = {mkeys.WARNINGS: "polyprof_warnings", mkeys.PLUGIN_ERRORS: "polyprof_plugin_errors",
                  mkeys.SCHEDULE: "polyprof_schedule"}


def notes(trace: Trace, shift_ns: int | None = None) -> dict[str, Any]:
    """The trace's warnings and plugin errors, those it has, as JSON values: what the
    Chrome (``otherData``), Kineto (its ``polyprof`` key) and Perfetto (Chrome metadata
    entries) exports write, so that a summary of the export tells of what was lost while
    recording, as one of the trace does. With ``shift_ns`` (what the export adds to every
    time), its ``schedule`` too, its stretches (``windows_ns``) on the export's times: the
    summary of the export then analyses what the trace's does (a schedule's cycles, one
    process's files: before, the time between them counted as idle)."""
    from .device_list import json_value  # (an export only)

    out: dict[str, Any] = {}
    for k in NOTES:
        v = trace.metadata.get(k)
        if isinstance(v, list) and v:
            out[k] = json_value(v)
    sched = trace.metadata.get(mkeys.SCHEDULE)
    if shift_ns is not None and isinstance(sched, dict) and sched:
        sched = json_value(sched)
        wins = sched.get("windows_ns")
        if isinstance(wins, list):
            sched["windows_ns"] = [[w[0] + shift_ns, w[1] + shift_ns if w[1] >= 0 else w[1]] for w in wins
                                   if _window(w)]
        out[mkeys.SCHEDULE] = sched
    return out


def _window(w: Any) -> bool:
    """A stretch as ``windows_ns`` holds it: [start, end] in ns (end -1: still open)."""
    return isinstance(w, list) and len(w) == 2 and all(type(x) is int for x in w)


def _note_ok(key: str, v: Any) -> bool:
    if key == mkeys.PLUGIN_ERRORS:
        return isinstance(v, dict)
    return isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("message"), str)
                                  and isinstance(v.get("plugin", ""), str))


def recorded_notes(found: Any) -> dict[str, Any]:
    """The warnings, plugin errors and schedule an export wrote (:func:`notes`; ``found``:
    the mapping they are in), those of the shape the metadata holds (``formats/safety.py``)."""
    out: dict[str, Any] = {}
    if not isinstance(found, dict):
        return out
    for k in NOTES:
        v = found.get(k)
        kept = [x for x in v if _note_ok(k, x)] if isinstance(v, list) else []
        if kept:
            out[k] = kept
    sched = found.get(mkeys.SCHEDULE)
    if isinstance(sched, dict):  # (its stretches and steps, those of the shapes the window reads)
        sched = dict(sched)
        for key, ok in (("windows_ns", _window), ("recorded_steps", lambda x: type(x) is int)):
            held = sched.pop(key, None)
            if isinstance(held, list):
                sched[key] = [x for x in held if ok(x)]
        out[mkeys.SCHEDULE] = sched
    return out
