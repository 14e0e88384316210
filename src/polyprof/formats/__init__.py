"""Readers and writers. ``load()`` detects the format by content, not extension.

``load`` is imported on first use: writing a trace (``polyprof run``) needs the
writers here, not the readers' detection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .detect import load


def __getattr__(name: str) -> Any:
    if name == "load":
        from .detect import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["load"]
