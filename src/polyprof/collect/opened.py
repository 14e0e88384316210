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

import logging

from . import pysection, recorder as rec_mod

log = logging.getLogger("polyprof")

#: the stat that marks a section cut at the session's stop
OPEN_AT_STOP = "open_at_stop"


def open_sections(rec: rec_mod.Recorder) -> list[tuple[str, int, dict[str, object] | None, int]]:
    """(name, start_ns, stats or None, thread ident) of each opening not yet closed that
    records into ``rec``.

    May run while other threads open and close sections (a capture's stop, on the
    server's thread). The compiled type's list is walked in C under the GIL: each
    object's fields are read together. A Python object's slot is read ``_app`` first:
    ``__enter__`` stores ``_tid`` and ``_t0`` before ``_app``, with no call between
    (pysection.py), so a taken slot has this opening's start, never the previous one's."""
    out: list[tuple[str, int, dict[str, object] | None, int]] = []
    fast = rec_mod._fast
    if fast is not None:
        if hasattr(fast, "open_sections"):
            out.extend(fast.open_sections(rec.sections))
        else:
            _old_extension()
    app = rec.sections.append
    for ref in list(pysection.open_objects):  # one list made in C: other threads may open or close
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


_told_old = False


def _old_extension() -> None:
    """Say once that the compiled sections open at a stop are not listed: the extension
    was built by an older polyprof, without ``open_sections``."""
    global _told_old
    if not _told_old:
        _told_old = True
        log.warning("the compiled section extension (collect/_fastsection) was built by an older polyprof and "
                    "cannot list its open sections: those open at a capture's stop are not recorded; rebuild it "
                    "(python setup.py build_ext --inplace, or pip install again)")


def cut_at(rec: rec_mod.Recorder, stop_ns: int) -> int:
    """Record ``rec``'s open sections as ending at ``stop_ns``, each with the stat
    ``open_at_stop``; how many."""
    got = open_sections(rec)
    for name, t0, stats, ident in got:
        rec.sections.append((name, t0, max(t0, stop_ns), {**(stats or {}), OPEN_AT_STOP: True}, ident))
    return len(got)
