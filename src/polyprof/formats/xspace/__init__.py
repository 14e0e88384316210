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

from typing import Any

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


def __getattr__(name: str) -> Any:
    module = _WRITER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module if module.startswith("..") else f".{module}", __name__), name)
