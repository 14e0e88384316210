"""Races between a capture's stop and the program's threads over the sections open then
(collect/opened.py, plugins/host.py ``cut_late``), with both section types.

The races are made deterministic by running the program's side at the exact point of
the stop where it would hit (a patched step of the stop, or of the section's opening),
on a real second thread where the race is between threads: real sessions, real section
objects, the real reader (the last test alone stands in for an extension built by an
older polyprof, which is not here)."""

from __future__ import annotations

import gc
import logging
import threading
import types
import weakref

import numpy as np
import pytest

import polyprof
from polyprof.collect import opened, pysection
from polyprof.collect import recorder as rec_mod
from polyprof.collect.opened import OPEN_AT_STOP
from polyprof.collect.session import Session
from polyprof.plugins.host import HostPlugin


def _capture_like() -> Session:
    """A session stopped as a capture's is (the program runs on): keep_open_sections."""
    return Session(["host"], options={"host": {"keep_open_sections": True, "sample_interval_s": 0,
                                               "journal_interval_s": 0, "nvtx": False}}).start()


def _host(s: Session) -> HostPlugin:
    return next(slot.plugin for slot in s._slots if isinstance(slot.plugin, HostPlugin))


def _rows(t: polyprof.Trace) -> dict[str, list[tuple[int, int, bool]]]:
    """name -> [(start, end, open_at_stop), ...]"""
    names = t.names().astype(str)
    col = t.stats.get(OPEN_AT_STOP)
    cut = set() if col is None else set(col.rows[np.asarray(col.values).astype(bool)].tolist())
    out: dict[str, list[tuple[int, int, bool]]] = {}
    for i, n in enumerate(names.tolist()):
        out.setdefault(n, []).append((int(t.start_ns[i]), int(t.end_ns[i]), i in cut))
    return out


def test_a_section_closed_during_the_stop_is_cut_not_lost(section_impl, monkeypatch) -> None:
    """A program thread closes its section between the stop's ``stop_ns`` and its cut
    (here while the stop snapshots the threads' names, the step between them): it is
    recorded cut at the stop. Before, it was in neither: too late to be kept
    (end > stop_ns), no longer open to be cut (review's lost.py)."""
    s = _capture_like()
    inside, leave = threading.Event(), threading.Event()

    def work() -> None:
        with section_impl("closes_during_stop"):
            inside.set()
            leave.wait(10)

    th = threading.Thread(target=work)
    th.start()
    assert inside.wait(10)
    still = section_impl("still_open").begin()
    with section_impl("closed_before"):
        pass
    snapshot = rec_mod.Recorder.snapshot_threads
    stopping = {"on": False}

    def snap(self: rec_mod.Recorder) -> None:
        if stopping["on"] and th.is_alive():  # the stop's snapshot: after stop_ns, before the cut
            leave.set()
            th.join(10)
        snapshot(self)

    monkeypatch.setattr(rec_mod.Recorder, "snapshot_threads", snap)
    stopping["on"] = True
    try:
        s.stop()
    finally:
        leave.set()
        th.join(10)
        still.end()
    stop_ns = _host(s).stop_ns
    rows = _rows(s.trace)
    assert rows["closes_during_stop"] == [(rows["closes_during_stop"][0][0], stop_ns, True)]  # before: missing
    assert rows["still_open"] == [(rows["still_open"][0][0], stop_ns, True)]
    assert rows["closed_before"][0][1] < stop_ns and not rows["closed_before"][0][2]


def test_a_section_closed_after_its_cut_is_recorded_once(section_impl, monkeypatch) -> None:
    """A section open at the cut that closes before the host plugin collects: its cut
    record and its own (ended after the stop) are one opening, kept once, cut."""
    s = _capture_like()
    sec = section_impl("closes_after_cut", k=1).begin()
    watch = rec_mod.watch_thread_starts

    def unwatch(rec: rec_mod.Recorder | None) -> None:  # the stop calls it right after the cut
        if rec is None:
            sec.end()
        watch(rec)

    monkeypatch.setattr(rec_mod, "watch_thread_starts", unwatch)
    s.stop()
    r = _host(s).recorder
    assert len([x for x in r.sections if x[0] == "closes_after_cut"]) == 2  # the cut's and its own
    rows = _rows(s.trace)
    assert rows["closes_after_cut"] == [(rows["closes_after_cut"][0][0], _host(s).stop_ns, True)]
    assert s.trace.stats["k"].values.tolist() == [1]


def test_a_plain_session_still_drops_what_closes_after_its_stop(section_impl, monkeypatch) -> None:
    """Without keep_open_sections (a program's end) a section that closes after the
    stop's ``stop_ns`` is not recorded, as before."""
    s = Session(["host"], options={"host": {"sample_interval_s": 0, "journal_interval_s": 0, "nvtx": False}}).start()
    sec = section_impl("late").begin()
    snapshot = rec_mod.Recorder.snapshot_threads

    def snap(self: rec_mod.Recorder) -> None:
        if not self.active:
            sec.end()
        snapshot(self)

    monkeypatch.setattr(rec_mod.Recorder, "snapshot_threads", snap)
    s.stop()
    assert "late" not in set(s.trace.names().astype(str).tolist())


def test_a_reopened_python_section_is_never_listed_with_its_previous_start(rec, section_impl, monkeypatch) -> None:
    """The Python type: an object on the open list (an opening on its stack) whose slot
    is free is opened again. Its opening reads the clock (a call: CPython may switch
    threads there) before it stores anything; another thread listing the open sections
    at that point (a capture's stop) sees the slot free, not taken with the start of the
    opening that was closed. Before, ``_app`` and ``_tid`` were stored before the clock
    was read and ``_t0`` after: the slot was listed with the old start (the section would
    have been cut from a time it was not open). The compiled type has no such point: its
    fields are stored in C with the GIL held, no call between."""
    if section_impl is not pysection.PySection:
        pytest.skip("the compiled type stores its fields with no call between (_fastsection.c section_enter)")
    x = section_impl("x")
    x.begin()  # the slot
    x.begin()  # the stack: the object stays listed once the slot closes
    th = threading.Thread(target=x.end)  # another thread's end() closes the slot
    th.start()
    th.join(10)
    (closed,) = [sec[1] for sec in rec.sections if sec[0] == "x"]  # the slot's opening, closed
    (on_stack,) = [t0 for n, t0, _, _ in opened.open_sections(rec) if n == "x"]
    seen: list[list[tuple[str, int, object, int]]] = []
    clock = pysection._now

    def now() -> int:  # the thread switch point: the stopping thread lists the open sections here
        lister = threading.Thread(target=lambda: seen.append(opened.open_sections(rec)))
        lister.start()
        lister.join(10)
        return clock()

    monkeypatch.setattr(pysection, "_now", now)
    x.begin()
    monkeypatch.setattr(pysection, "_now", clock)
    assert len(seen) == 1
    starts = sorted(t0 for n, t0, _, _ in seen[0] if n == "x")
    assert closed not in starts  # before: [closed, on_stack], the slot's start from its closed opening
    assert starts == [on_stack]
    now_open = sorted(t0 for n, t0, _, _ in opened.open_sections(rec) if n == "x")
    assert len(now_open) == 2 and now_open[0] == on_stack and now_open[1] > closed
    x.end()
    x.end()
    assert opened.open_sections(rec) == []


def test_python_sections_dropped_while_open_leave_no_entry(rec, section_impl) -> None:
    """The Python type's open list is weak: objects dropped while open are freed (with
    them their session's recorder), and their entries go with them."""
    if section_impl is not pysection.PySection:
        pytest.skip("the Python type's open list")
    gc.collect()  # what earlier tests dropped
    before = len(pysection.open_objects)
    objs = [section_impl(f"abandoned{i}").begin() for i in range(100)]
    objs[0].begin()  # one on its stack too
    refs = [weakref.ref(o) for o in objs]
    assert len(pysection.open_objects) == before + 100
    del objs
    gc.collect()
    assert [r() for r in refs] == [None] * 100
    assert len(pysection.open_objects) == before
    with section_impl("closed"):
        pass
    assert len(pysection.open_objects) == before


def test_an_extension_without_open_sections_is_said_once(monkeypatch, caplog) -> None:
    """A compiled extension built by an older polyprof lacks ``open_sections``: its open
    sections cannot be listed, and a warning says so once (before: silently none). The
    old build is stood in for by a module without that function (no old build here)."""
    rec = rec_mod.Recorder()
    monkeypatch.setattr(rec_mod, "_fast", types.SimpleNamespace(section=object))
    monkeypatch.setattr(opened, "_told_old", False)
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert opened.open_sections(rec) == []
        assert opened.open_sections(rec) == []
    said = [r for r in caplog.records if "open_sections" in r.getMessage() or "older polyprof" in r.getMessage()]
    assert len(said) == 1
