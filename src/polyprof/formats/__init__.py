"""Readers and writers. ``load()`` detects the format by content, not extension.

``load`` is imported on first use: writing a trace (``polyprof run``) needs the
writers here, not the readers' detection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .detect import load

__getattr__ = lazy_names(__name__, {"load": "detect"})


__all__ = ["load"]
