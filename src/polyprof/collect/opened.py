"""The sections still open when a session stops while the program runs on (a capture's
stop): recorded cut at the stop, marked ``open_at_stop`` (docs/capture.md).

A section is recorded when it closes. A session that stops at the program's end has
none open that matter (``polyprof run`` turns the end's signals into ``SystemExit`` so
they close: docs/architecture.md), but a capture's session stops while the program runs
on, inside its loop: the step's sections open then would be dropped, while the device
work launched inside them is kept. Each section object whose first opening is not
closed, in its slot or on its stacks of further openings, is known (the compiled type's
list of open objects, ``_fastsection.open_sections``, and :data:`pysection.open_objects`
for the Python type, both without keeping an object alive); those that record into the stopping
recorder are its open sections. A section opened before the session started records
nothing (no session was there to record it) and is not among them.
"""

from __future__ import annotations

from . import pysection, recorder as rec_mod

#: the stat that marks a section cut at the session's stop
OPEN_AT_STOP = "open_at_stop"


def open_sections(rec: rec_mod.Recorder) -> list[tuple[str, int, dict[str, object] | None, int]]:
    """(name, start_ns, stats or None, thread ident) of each opening not yet closed that
    records into ``rec``."""
    out: list[tuple[str, int, dict[str, object] | None, int]] = []
    fast = rec_mod._fast
    if fast is not None and hasattr(fast, "open_sections"):  # an extension built before may lack it
        out.extend(fast.open_sections(rec.sections))
    app = rec.sections.append
    for ref in pysection.open_objects.valuerefs():  # one list made in C: other threads may open or close
        sec = ref()
        if sec is None:
            continue
        held = sec._app
        if held is not None and held == app:
            out.append((sec.name, sec._t0, sec.stats or None, sec._tid))
        for key, stack in list((sec._more or {}).items()):
            ident = key[0] if isinstance(key, tuple) else key
            out.extend((sec.name, t0, sec.stats or None, ident) for t0, a in list(stack) if a == app)
    return out


def cut_at(rec: rec_mod.Recorder, stop_ns: int) -> int:
    """Record ``rec``'s open sections as ending at ``stop_ns``, each with the stat
    ``open_at_stop``; how many."""
    got = open_sections(rec)
    for name, t0, stats, ident in got:
        rec.sections.append((name, t0, max(t0, stop_ns), {**(stats or {}), OPEN_AT_STOP: True}, ident))
    return len(got)
