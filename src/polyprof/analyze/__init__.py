"""Analyses: functions from a Trace to DataFrames. Each documents its columns."""

from .sections import section_stats
from .events import event_stats

__all__ = ["section_stats", "event_stats"]
