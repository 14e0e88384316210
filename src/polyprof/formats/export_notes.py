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


#: the metadata keys the exports carry for the reader to restore (:func:`notes`)
NOTES = (mkeys.WARNINGS, mkeys.PLUGIN_ERRORS)
#: the Perfetto export's Chrome metadata entries that hold them (JSON), by key
PERFETTO_NOTES = {mkeys.WARNINGS: "polyprof_warnings", mkeys.PLUGIN_ERRORS: "polyprof_plugin_errors"}


def notes(trace: Trace) -> dict[str, list[Any]]:
    """The trace's warnings and plugin errors, those it has, as JSON values: what the
    Chrome (``otherData``), Kineto (its ``polyprof`` key) and Perfetto (Chrome metadata
    entries) exports write, so that a summary of the export tells of what was lost while
    recording, as one of the trace does."""
    out = {}
    for k in NOTES:
        v = trace.metadata.get(k)
        if isinstance(v, list) and v:
            from .device_list import json_value  # (an export only)

            out[k] = json_value(v)
    return out


def _note_ok(key: str, v: Any) -> bool:
    if key == mkeys.PLUGIN_ERRORS:
        return isinstance(v, dict)
    return isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("message"), str)
                                  and isinstance(v.get("plugin", ""), str))


def recorded_notes(found: Any) -> dict[str, list[Any]]:
    """The warnings and plugin errors an export wrote (:func:`notes`; ``found``: the
    mapping they are in), those of the shape the metadata holds (``formats/safety.py``)."""
    out: dict[str, list[Any]] = {}
    if not isinstance(found, dict):
        return out
    for k in NOTES:
        v = found.get(k)
        kept = [x for x in v if _note_ok(k, x)] if isinstance(v, list) else []
        if kept:
            out[k] = kept
    return out
