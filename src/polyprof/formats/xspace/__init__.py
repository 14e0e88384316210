"""XSpace (``*.xplane.pb``): the profile format of TensorFlow, JAX and XProf.

A package by stage, each module one job:

- ``wire``: the bytes: protobuf classes, parsing with validation, gzip, sniffing;
- ``decode`` (+ the compiled ``_wire.c``): every event and event stat as columns;
- ``reader`` and ``events``: planes, lines and events into a Trace;
- ``stats``: XStat values into stat columns;
- ``xla``: what XProf's and JAX's conventions mean (wall anchor, flows, aliases);
- ``names``: the names and limits both directions share;
- ``writer``, ``written_stats``, ``plane_writer``, ``encode``: Trace -> XSpace, with the
  stats and line names XProf's converters read.

See ``reader`` and ``writer`` for what goes where; docs/architecture.md for the layout.
"""

from __future__ import annotations

from ..xprof_names import line_homes, write_order, written_names
from .decode import IMPLEMENTATION
from .names import CAT_TRACEME, XPROF_ALIASES
from .plane_writer import msgspec_text
from .reader import from_bytes, from_space, load
from .wire import is_protobuf_xspace, parse, sniff
from .writer import to_bytes, to_space, write, write_logdir

__all__ = ["CAT_TRACEME", "IMPLEMENTATION", "XPROF_ALIASES", "from_bytes", "from_space", "is_protobuf_xspace",
           "line_homes", "load", "msgspec_text", "parse", "sniff", "to_bytes", "to_space", "write", "write_logdir",
           "write_order", "written_names"]
