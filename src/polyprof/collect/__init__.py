"""Collection: the session, the plugin contract and registry, clocks, the recorder.

The names below are imported on first use: ``polyprof.section`` lives in
:mod:`.recorder`, and a program that only marks sections need not import the session
(and NumPy with it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .plugin import Availability, Plugin, SessionContext
    from .session import Session, profile

_NAMES = {"Availability": "plugin", "Plugin": "plugin", "SessionContext": "plugin", "Session": "session",
          "profile": "session"}
__getattr__ = lazy_names(__name__, _NAMES)


__all__ = ["Plugin", "Availability", "SessionContext", "Session", "profile"]
