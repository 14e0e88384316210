"""The cyclic garbage collector around polyprof's own work (see the package doc)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off inside the block (as it was after): for code that makes
    many objects that form no reference cycles (decoded JSON), which the collector
    would only re-scan."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def quiet_start() -> bool:
    """Start ``polyprof run`` with the collector off and NumPy imported first (every run
    imports it for the trace's columns; imported later in the start it cost more).
    Returns whether the collector was on, for :func:`freeze_before_program`."""
    was_on = gc.isenabled()
    gc.disable()
    import numpy  # noqa: F401

    return was_on


def freeze_before_program(collector_was_on: bool) -> None:
    """Move every object made so far (polyprof's, NumPy's, the plugins' modules') out of
    the collector's sight just before the profiled program starts, and turn the
    collector back on if it was on. Those objects live until the process ends anyway;
    what the program makes is collected and finalized as under plain ``python``."""
    gc.freeze()
    if collector_was_on:
        gc.enable()


def pause_for_command() -> None:
    """A summary, report or diff: the collector off until the command returns
    (:func:`restore_collector`). What such a command makes (modules, columns, tables,
    rendered text) it keeps until it ends, and forms no reference cycles to free, so a
    collection would only re-scan it: half a hundred collections at its start alone,
    each walking the long lists and dicts then young."""
    gc.disable()


def freeze_for_exit() -> None:
    """A read-only command is done: its heap lives until the process ends, so the
    interpreter's last collections need not walk it."""
    gc.freeze()


def collector_on() -> bool:
    """Whether the cyclic collector is on now."""
    return gc.isenabled()


def restore_collector(was_on: bool) -> None:
    """Turn the collector back on if it was on (after :func:`quiet_start`)."""
    if was_on:
        gc.enable()


_LIBC: object = None


def trim() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). A reader that frees a chunk's arrays before making the next one's keeps
    its resident memory to about one chunk this way: glibc raises its mmap threshold as
    large blocks are freed, so later arrays come from the heap, whose freed pages it
    otherwise keeps (formats/kineto/chunks.py)."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC = lib.malloc_trim if hasattr(lib, "malloc_trim") else False
        except OSError:
            _LIBC = False
    if _LIBC:
        _LIBC(0)  # type: ignore[operator]
