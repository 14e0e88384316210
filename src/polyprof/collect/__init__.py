"""Collection: the session, the plugin contract and registry, clocks, the recorder.

The names below are imported on first use: ``polyprof.section`` lives in
:mod:`.recorder`, and a program that only marks sections need not import the session
(and NumPy with it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plugin import Availability, Plugin, SessionContext
    from .session import Session, profile

_NAMES = {"Availability": "plugin", "Plugin": "plugin", "SessionContext": "plugin", "Session": "session",
          "profile": "session"}


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Plugin", "Availability", "SessionContext", "Session", "profile"]
