"""Per-section statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.categories import Kind
from ..trace.core import Trace
from .grouping import duration_stats


def section_stats(trace: Trace) -> pd.DataFrame:
    """One row per section name (polyprof sections and user annotations).

    Columns: ``name``, ``count``, ``total_ns``, ``mean_ns``, ``median_ns``, ``min_ns``,
    ``max_ns``, ``p99_ns`` (host time, nanoseconds), ``first_start_ns``, ``last_end_ns``.
    Sorted by total time, largest first.
    """
    rows = trace.rows_of_kind(Kind.ANNOTATION)
    return duration_stats(trace, rows)
