"""The collectives and transfers of one rank (``analyze/collectives.py``, where the
single-trace summary computes them too), as the ranks' code has long imported them."""

from __future__ import annotations

from ..analyze.collectives import (ARGS, COLUMNS, DTYPE_BYTES, bus_factor, collective_rows, collective_stats,
                                   collective_table, normalise_op)

__all__ = ["ARGS", "COLUMNS", "DTYPE_BYTES", "bus_factor", "collective_rows", "collective_stats",
           "collective_table", "normalise_op"]
