"""Readers and writers. ``load()`` detects the format by content, not extension."""

from .detect import load

__all__ = ["load"]
