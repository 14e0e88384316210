"""NVTX ranges and marks through polyprof's own NVTX injection library (``_nvtxinject.c``).

Who injects: at a session's start the host plugin (every session has it, whatever its
device plugins) sets ``NVTX_INJECTION64_PATH`` to this package's library when the
variable is unset, so the first NVTX call of every NVTX-using library in the process
(torch's ``torch.cuda.nvtx``, the ``nvtx`` package, CuPy, a C++ extension...) attaches to
it, with or without a GPU. When another tool already set the variable (Nsight Systems
records NVTX itself), polyprof says so in one line and does not record NVTX; when the
library is not built (no C compiler at install, or ``POLYPROF_PURE_PYTHON=1``), NVTX is
not recorded by this path and the cupti plugin, on a GPU, falls back to CUPTI's own NVTX
records (its MARKER kind, through libcupti as the injection library).

NVTX reads the variable once per NVTX instance, at that instance's first call: a library
that made an NVTX call before the session started stays without a tool for the rest of
the process (so does the ``nvtx`` package's domain cache, which keeps a no-op domain).
``polyprof run`` starts the session before the program, so this concerns only
``polyprof.profile()`` opened after NVTX was already used. The variable is unset at stop,
so programs started later do not load the library.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

log = logging.getLogger("polyprof")

ENV = "NVTX_INJECTION64_PATH"
#: the library's 40-byte event (``event`` in _nvtxinject.c); kind 0: a slot not yet filled
EVENT_DTYPE = np.dtype([("t", "<i8"), ("range", "<u8"), ("tid", "<u4"), ("name", "<u4"), ("domain", "<u4"),
                        ("color", "<u4"), ("category", "<u4"), ("kind", "<u4")])
PUSH, POP, START, END, MARK = 1, 2, 3, 4, 5
#: a name given to an id (``naming`` in _nvtxinject.c): nvtxNameCategory, nvtxNameOsThread
NAMING_DTYPE = np.dtype([("what", "<u4"), ("domain", "<u4"), ("key", "<u4"), ("name", "<u4")])
NAMED_CATEGORY, NAMED_THREAD = 1, 2
DEFAULT_MAX_EVENTS = 1 << 22  # 160 MiB of slots at most, allocated 64k events at a time


@functools.lru_cache(maxsize=1)
def library_path() -> Path | None:
    """The built injection library, or None (not built, or ``POLYPROF_PURE_PYTHON=1``)."""
    if os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0"):
        return None
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = here / f"_nvtxinject{suffix}"
        if p.is_file():
            return p
    return None


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The injection library loaded here (the same one NVTX loads: one copy in the process)."""
    path = library_path()
    if path is None:
        return None
    lib = ctypes.CDLL(str(path))
    lib.polyprof_nvtx_start.argtypes = [ctypes.c_uint64]
    lib.polyprof_nvtx_start.restype = ctypes.c_int
    lib.polyprof_nvtx_stop.argtypes = []
    lib.polyprof_nvtx_stop.restype = None
    lib.polyprof_nvtx_counts.argtypes = [ctypes.c_void_p]
    lib.polyprof_nvtx_counts.restype = None
    for fn in (lib.polyprof_nvtx_events, lib.polyprof_nvtx_strings, lib.polyprof_nvtx_namings):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        fn.restype = ctypes.c_uint64
    return lib


def not_built_reason() -> str:
    if os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0"):
        return "polyprof's NVTX injection library is off (POLYPROF_PURE_PYTHON=1)"
    return "polyprof's NVTX injection library is not built (no C compiler at install)"


def injects() -> bool:
    """Whether polyprof's library receives NVTX in this process now (the cupti plugin asks,
    to leave NVTX to it rather than point NVTX at libcupti)."""
    path = library_path()
    if path is None:
        return False
    current = os.environ.get(ENV)
    return current is None or _same_file(current, path)


def _same_file(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Capture(NamedTuple):
    """One session's NVTX records: the events (EVENT_DTYPE, filled slots only), the names
    given to categories and OS threads (NAMING_DTYPE) and the string arena (a string id is
    its offset + 1, NUL-terminated UTF-8)."""

    events: np.ndarray
    strings: bytes
    counts: dict[str, int]
    namings: np.ndarray = np.zeros(0, NAMING_DTYPE)


class NvtxRecorder:
    """Start, stop and read the library for one session."""

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.max_events = int(max_events)
        self.problem: str | None = None  # why NVTX is not recorded, one line
        self.other_tool = False  # the problem is another NVTX tool (worth a warning)
        self._env_set = False
        self._started = False

    def start(self) -> bool:
        lib = library()
        if lib is None:
            self.problem = f"{not_built_reason()}; NVTX ranges are not recorded by it"
            return False
        path = library_path()
        current = os.environ.get(ENV)
        if current and path is not None and not _same_file(current, path):
            self.problem = f"{ENV} names another NVTX tool ({current}); polyprof does not record NVTX ranges"
            self.other_tool = True
            return False
        if current is None:
            os.environ[ENV] = str(path)
            self._env_set = True
        lib.polyprof_nvtx_start(self.max_events)
        self._started = True
        return True

    def stop(self) -> None:
        if not self._started:
            return
        lib = library()
        if lib is not None:
            lib.polyprof_nvtx_stop()
        if self._env_set and os.environ.get(ENV) == str(library_path()):
            os.environ.pop(ENV, None)
        self._env_set = False

    @staticmethod
    def counts() -> dict[str, int]:
        lib = library()
        if lib is None:
            return {}
        out = (ctypes.c_uint64 * 5)()
        lib.polyprof_nvtx_counts(out)
        return dict(zip(("recorded", "dropped", "attached", "strings_not_interned", "string_bytes"), map(int, out)))

    def take(self) -> Capture | None:
        """What was recorded (after stop); None when nothing was started."""
        lib = library()
        if not self._started or lib is None:
            return None
        namings = np.zeros(int(lib.polyprof_nvtx_namings(None, 0)), NAMING_DTYPE)
        if len(namings):
            got_n = int(lib.polyprof_nvtx_namings(namings.ctypes.data, len(namings)))
            namings = namings[:got_n]
        counts = self.counts()  # after the namings: the arena read below holds their strings
        n = counts["recorded"]
        ev = np.zeros(n, EVENT_DTYPE)
        if n:
            lib.polyprof_nvtx_events(ev.ctypes.data, n)
        arena = ctypes.create_string_buffer(max(counts["string_bytes"], 1))
        got = lib.polyprof_nvtx_strings(arena, counts["string_bytes"])
        filled = ev["kind"] != 0
        counts["unfinished"] = int((~filled).sum())  # claimed by a thread still writing at stop
        return Capture(ev[filled] if not filled.all() else ev, arena.raw[:got], counts, namings)
