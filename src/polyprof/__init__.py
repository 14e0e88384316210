"""polyprof: a vendor-neutral, pluggable profiler for ML and dataflow programs.

    with polyprof.profile() as prof:
        with polyprof.section("forward"):
            ...
    prof.trace.to_pandas()
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import PolyprofError, TraceFormatError

if TYPE_CHECKING:
    from .capture import Server
    from .collect.recorder import counter, mark, section, step
    from .collect.schedule import schedule
    from .collect.session import Session, profile
    from .formats.detect import load
    from .formats.registry import write as export
    from .ranks.traceset import TraceSet, load_ranks
    from .trace.core import Trace


def serve(port: int = 0, host: str = "127.0.0.1", **options: Any) -> "Server":
    """Serve on-demand captures from this process (``tensorflow.ProfilerService`` over
    gRPC; needs ``polyprof[serve]``): nothing is recorded until a client such as
    ``polyprof capture`` or XProf's "Capture profile" asks. Loopback by default; any
    other address needs a token or TLS. See :func:`polyprof.capture.serve`."""
    from .capture import serve as start

    return start(port, host, **options)


#: subpackages reachable as attributes (``polyprof.analyze.kernel_breakdown``), imported on
#: first use so that ``import polyprof`` stays cheap for a profiled program
_LAZY = ("analyze", "ranks", "store", "report", "trace", "formats", "derive")


#: names imported on first use, (module, attribute): ``import polyprof`` in a program that
#: only marks sections imports neither NumPy (the session, the trace) nor the readers;
#: the ranks' executors import multiprocessing and concurrent.futures; the recorder (and
#: its compiled sections, ``lowlevel._unseen``) waits for a program's first section, mark
#: or session, so the ``polyprof`` command, which records nothing, never loads it
_LAZY_NAMES = {"section": ("collect.recorder", "section"), "mark": ("collect.recorder", "mark"),
               "counter": ("collect.recorder", "counter"), "step": ("collect.recorder", "step"),
               "TraceSet": ("ranks.traceset", "TraceSet"), "load_ranks": ("ranks.traceset", "load_ranks"),
               "Session": ("collect.session", "Session"), "profile": ("collect.session", "profile"),
               "schedule": ("collect.schedule", "schedule"), "load": ("formats.detect", "load"),
               "export": ("formats.registry", "write"), "Trace": ("trace.core", "Trace")}


def __getattr__(name: str) -> Any:
    if name in _LAZY or name in _LAZY_NAMES:
        import importlib

        if name in _LAZY:
            return importlib.import_module(f"{__name__}.{name}")
        module, attr = _LAZY_NAMES[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value  # later lookups skip this function
        return value
    from ._lazy import submodule  # (polyprof.capture, polyprof.writers...: as the _LAZY ones)

    return submodule(__name__, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_LAZY_NAMES})


__all__ = ["profile", "section", "mark", "counter", "step", "schedule", "load", "serve", "Trace", "Session",
           "PolyprofError", "TraceFormatError", "load_ranks", "TraceSet", "__version__", "export"]

if _os.environ.get("POLYPROF_SERVE"):  # serve captures from a program that imports polyprof
    from .capture import serve_from_env as _serve_from_env

    _serve_from_env()
