"""The trace schema: planes, tracks, columnar events, stats, flows, counters."""

from .builder import TraceBuilder
from .categories import Kind, kind_of
from .core import Trace
from .merge import merge
from .model import Plane, Track
from .stats import StatColumn

__all__ = ["Trace", "TraceBuilder", "Plane", "Track", "StatColumn", "Kind", "kind_of", "merge"]
