"""XSpace (``*.xplane.pb``): the profile format of TensorFlow, JAX and XProf.

A package by stage, each module one job:

- ``wire``: the bytes: protobuf classes, parsing with validation, gzip, sniffing;
- ``decode`` (+ the compiled ``_wire.c``): every event and event stat as columns;
- ``reader`` and ``events``: planes, lines and events into a Trace;
- ``deferred``: the stat columns, each built when first looked up;
- ``stats``: XStat values into stat columns;
- ``xla``: what XProf's and JAX's conventions mean (wall anchor, flows, categories);
- ``names``: the names and limits both directions share;
- ``encode`` (+ ``_wire.c``): one line's events from columns into ``XLine.events`` bytes.

The writer (Trace -> XSpace, with the stats and line names XProf's converters read) is
:mod:`polyprof.writers.xspace`: it reads polyprof's analyses, so it sits above them.

See ``reader`` for what goes where; docs/architecture.md for the layout.
"""

from __future__ import annotations

from .decode import IMPLEMENTATION
from .names import CAT_TRACEME, XPROF_ALIASES
from .reader import from_bytes, from_space, load
from .wire import is_protobuf_xspace, parse, sniff

__all__ = ["CAT_TRACEME", "IMPLEMENTATION", "XPROF_ALIASES", "from_bytes", "from_space", "is_protobuf_xspace",
           "load", "parse", "sniff"]
