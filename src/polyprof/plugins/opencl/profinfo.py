"""Each recorded command's four profiling timestamps (queued, submit, start, end).

pyopencl asks OpenCL for one timestamp per Python call (four per command: most of
the plugin's cost at stop). The compiled loop (``_profinfo.c``, an
optional extension built by ``setup.py``) asks for all of them in C, through
``clGetEventProfilingInfo`` of the OpenCL ICD loader pyopencl itself has loaded; pyopencl's
own calls are the fallback and the reference (tests/test_opencl.py checks both give the
same timestamps). ``implementation()`` says which is in use; ``POLYPROF_PURE_PYTHON=1``
forces pyopencl's, as it does for sections and the readers.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING

import numpy as np
from ...lowlevel.compiled import optional

if TYPE_CHECKING:
    from pyopencl import Event
    from pyopencl import profiling_info as ProfilingInfo

_profinfo = optional(__package__, "_profinfo")  # the Python loop otherwise (lowlevel/compiled.py)


@functools.lru_cache(maxsize=1)
def _loader_function() -> int:
    """The address of ``clGetEventProfilingInfo`` in the OpenCL ICD loader pyopencl is
    linked against (pyopencl's own, when it ships one), or 0: looked up from pyopencl's
    extension module, whose dependencies ``dlsym`` searches."""
    try:
        from pyopencl import _cl

        fn = ctypes.CDLL(_cl.__file__).clGetEventProfilingInfo
    except (ImportError, OSError, AttributeError):
        return 0
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def implementation() -> str:
    """"c" (one C loop through the ICD loader) or "python" (pyopencl's calls)."""
    return "c" if _profinfo is not None and _loader_function() else "python"


def timestamps(events: list[Event], profiling_info: type[ProfilingInfo]) -> tuple[np.ndarray, np.ndarray]:
    """(n, 4) int64 timestamps of ``events`` (pyopencl Events, kept alive by the caller)
    and whether all four could be read for each; a row that could not be read is -1."""
    n = len(events)
    ts = np.full((n, 4), -1, np.int64)
    ok = np.zeros(n, bool)
    fn = _loader_function() if _profinfo is not None else 0
    if fn and n:
        handles = np.fromiter((e.int_ptr for e in events), np.int64, n)
        status = np.zeros(n, np.int32)
        assert _profinfo is not None  # fn is the loader's only with it
        _profinfo.times(fn, handles, ts, status)
        ok = status == 0
        ts[~ok] = -1
        return ts, ok
    pi = profiling_info
    which = (pi.QUEUED, pi.SUBMIT, pi.START, pi.END)
    for i, ev in enumerate(events):
        try:
            get = ev.get_profiling_info
            ts[i] = np.asarray([get(w) for w in which], np.int64)
            ok[i] = True
        except Exception:
            pass
    return ts, ok
