"""The cyclic garbage collector around polyprof's own work, and the memory of a big load
(see the package doc)."""

from __future__ import annotations

import contextlib
import gc
import os
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

#: the compiled ``_heapcache`` once :func:`_module` imported it (None before, or without it)
_heapcache: ModuleType | None = None
_looked = False


def _module() -> ModuleType | None:
    """``_heapcache``, imported on first use: importing it imports NumPy (its C API table),
    which every command's start imports this module before (the CLI, ``polyprof run``,
    before ``blas`` starts NumPy with one OpenBLAS thread and the collector is paused)."""
    global _heapcache, _looked
    if not _looked:
        _looked = True
        if os.environ.get("POLYPROF_PURE_PYTHON", "") in ("", "0"):
            try:
                from . import _heapcache as compiled  # type: ignore[attr-defined]  # optional compiled module
            except ImportError:  # not built (no compiler, or NumPy absent at build time)
                compiled = None
            _heapcache = compiled
    return _heapcache


def __getattr__(name: str) -> str:
    #: IMPLEMENTATION: "c" when a big load's large arrays reuse freed pages (``_heapcache``),
    #: else "python" (every array as NumPy makes it); decided on first use (:func:`_module`)
    if name == "IMPLEMENTATION":
        return "c" if _module() is not None else "python"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: arrays of at least this many bytes are the reuse handler's (smaller ones are NumPy's, as
#: usual): the columns of ~1M events and more; below that glibc's heap already reuses freed
#: pages (its mmap threshold rises to 32 MB as such blocks are freed)
MIN_BLOCK = 8 << 20
#: a reader that frees columns of at least this many bytes mid-build gives their pages back
#: (:func:`trim`) before it makes the next big ones: glibc serves blocks under its raised
#: mmap threshold (:func:`prepare_heap`) from the heap, whose freed pages stay resident
#: beside the new ones; under it (a few hundred thousand events) the build reuses them
#: itself and a trim would only cost it the faults of taking them back
#: (docs/benchmarks.md, "Issue 35's targets": the peak of a million-event load)
TRIM_BYTES = 2 << 20


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


def _kept_limit() -> int:
    """The most freed memory kept for reuse at once: a quarter of the machine's memory."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (OSError, ValueError):
        return 1 << 30


@contextmanager
def reusing_freed_pages(active: bool = True, limit: int | None = None) -> Iterator[None]:
    """Inside the block (when ``active``), NumPy arrays of ``MIN_BLOCK`` bytes or more made in
    this thread come from the pages of such arrays freed before, moved into place, instead
    of memory the kernel must fault in and zero (``_heapcache.c``): a reader's columns and
    temporaries of tens of millions of events (docs/benchmarks.md, "Linear growth to 50M
    trace events"). At most ``limit`` bytes (default: a quarter of the machine's memory)
    are kept; what is kept is unmapped at :func:`trim` and when the block ends, which also
    puts NumPy's handler back, raised or not. Only around a reader's call and a read-only
    command's whole work (:func:`for_command`): a profiled program's own arrays are never
    made this way. Nothing without the compiled module."""
    compiled = _module() if active else None
    if compiled is None:
        yield
        return
    old = compiled.install(_kept_limit() if limit is None else limit, MIN_BLOCK)
    try:
        yield
    finally:
        compiled.uninstall(old)


def for_command(read_only: bool) -> contextlib.AbstractContextManager[None]:
    """Around a command: for a read-only one (``summary``, ``report``, ...: no profiled
    program runs in it), :func:`reusing_freed_pages` for the whole command, so that the
    analyses' columns and temporaries of a big trace reuse the pages of those freed before
    them, as the reader's do. Without it every array of 32 MB or more (past glibc's mmap
    threshold: ~4M events' int64 column) is a fresh mapping that the kernel faults in,
    zeroes (with NumPy's huge-page hint, after compacting memory for it) and takes back
    when freed; a summary of 20M events spent half its CPU time in the kernel that way
    (docs/benchmarks.md, "Whole-process scale"). The peak does not grow: what is kept was
    live. Any other command: nothing."""
    return reusing_freed_pages() if read_only else contextlib.nullcontext()


def reuse_stats() -> dict[str, int]:
    """The reuse handler's counts (blocks and bytes live, kept, reused, fresh); empty without it."""
    compiled = _module()
    return dict(compiled.stats()) if compiled is not None else {}


def trim() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere), and the pages a big load keeps for reuse (:func:`reusing_freed_pages`).
    A reader that frees a chunk's arrays before making the next one's keeps
    its resident memory to about one chunk this way: glibc raises its mmap threshold as
    large blocks are freed, so later arrays come from the heap, whose freed pages it
    otherwise keeps (formats/kineto/chunks.py)."""
    global _LIBC
    if _heapcache is not None:  # (imported: it may keep pages; never imported here to ask)
        _heapcache.release()
    if _LIBC is None:
        from .libc import libc  # ctypes: only once a reader trims

        lib = libc("malloc_trim")
        _LIBC = lib.malloc_trim if lib is not None else False
    if _LIBC:
        _LIBC(0)  # type: ignore[operator]


#: the block :func:`prepare_heap` frees (untouched): glibc's mmap threshold rises
#: to its size, its trim threshold to twice that; under glibc's 32 MiB ceiling
THRESHOLD_BLOCK = 24 << 20
#: the part of the heap made ready for huge pages, then freed for reuse (below the threshold)
HUGE_HEAP = 16 << 20
_HUGE = 2 << 20  # a transparent huge page on x86-64 and arm64 (4 KiB base pages)
_MADV_HUGEPAGE = 14
_prepared = False


def prepare_heap() -> None:
    """Once per process: make and free one untouched block of :data:`THRESHOLD_BLOCK` bytes,
    which raises glibc's mmap threshold to its size and the trim threshold to twice that,
    as the first such block a program frees does; then grow the heap by :data:`HUGE_HEAP`
    bytes, mark their whole 2 MiB pages for transparent huge pages (``madvise``) and free
    them, kept at the heap's top for reuse. glibc starts a process serving every block of
    128 KiB or more with a fresh mapping, faulted in page by page and unmapped when
    freed; a small trace's columns and temporaries (0.1-0.6 MB each) were mapped,
    faulted and unmapped one by one, and the heap trimmed between them. After it they
    come from the heap, reuse its freed pages, and each 2 MiB of it is one fault, not
    512: what glibc's ``glibc.malloc.hugetlb=1`` tunable does for a whole process from
    its start (docs/benchmarks.md, "Eleventh session"). Nothing elsewhere than glibc."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    import ctypes  # (NumPy has imported it: no cost)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        malloc, free, madvise = libc.malloc, libc.free, libc.madvise
        gnu = libc.gnu_get_libc_version  # glibc only: its thresholds are what this is about
    except (OSError, AttributeError, TypeError):  # TypeError: no CDLL(None) (Windows)
        return
    del gnu
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    madvise.restype, madvise.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    block = malloc(THRESHOLD_BLOCK)
    if not block:
        return
    free(block)
    heap = malloc(HUGE_HEAP)
    if not heap:
        return
    lo = (heap + _HUGE - 1) // _HUGE * _HUGE
    hi = (heap + HUGE_HEAP) // _HUGE * _HUGE
    if hi > lo:
        madvise(lo, hi - lo, _MADV_HUGEPAGE)  # refused (no THP): plain pages, as before
    free(heap)
