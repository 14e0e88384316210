"""XSpace (``*.xplane.pb``): the profile format of TensorFlow, JAX and XProf.

A package by stage, each module one job:

- ``wire``: the bytes: protobuf classes, parsing with validation, gzip, sniffing;
- ``decode`` (+ the compiled ``_wire.c``): every event and event stat as columns;
- ``reader`` and ``events``: planes, lines and events into a Trace;
- ``deferred``: the stat columns, each built when first looked up;
- ``stats``: XStat values into stat columns;
- ``xla``: what XProf's and JAX's conventions mean (wall anchor, flows, categories);
- ``names``: the names and limits both directions share;
- ``writer``, ``written_stats``, ``plane_writer``, ``encode``: Trace -> XSpace, with the
  stats and line names XProf's converters read.

See ``reader`` and ``writer`` for what goes where; docs/architecture.md for the layout.
"""

from __future__ import annotations

from ..._lazy import lazy_names
from .decode import IMPLEMENTATION
from .names import CAT_TRACEME, XPROF_ALIASES
from .reader import from_bytes, from_space, load
from .wire import is_protobuf_xspace, parse, sniff

#: the writer's names, imported on first use (reading needs none of the writer's modules)
_WRITER = {"to_bytes": "writer", "to_space": "writer", "write": "writer", "write_logdir": "writer",
           "msgspec_text": "plane_writer", "line_homes": "..xprof_names", "write_order": "..xprof_names",
           "written_names": "..xprof_names"}

__all__ = ["CAT_TRACEME", "IMPLEMENTATION", "XPROF_ALIASES", "from_bytes", "from_space", "is_protobuf_xspace",
           "load", "parse", "sniff", *_WRITER]


__getattr__ = lazy_names(__name__, _WRITER)
