"""polyprof: a vendor-neutral, pluggable profiler for ML and dataflow programs.

    with polyprof.profile() as prof:
        with polyprof.section("forward"):
            ...
    prof.trace.to_pandas()
"""

from __future__ import annotations

from ._version import __version__
from .collect.recorder import counter, mark, section, step
from .collect.session import Session, profile
from .errors import PolyprofError, TraceFormatError
from .formats.detect import load
from .ranks.traceset import TraceSet, load_ranks
from .trace.core import Trace

__all__ = ["profile", "section", "mark", "counter", "step", "load", "Trace", "Session",
           "PolyprofError", "TraceFormatError", "load_ranks", "TraceSet", "__version__"]
