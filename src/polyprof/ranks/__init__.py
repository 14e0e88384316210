"""Many ranks of one job: identity, per-rank work on an executor, clock alignment from
collectives, collective statistics and stragglers (docs/ranks.md).

Names are imported on first use, so ``import polyprof`` stays free of pandas."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "TraceSet": "traceset", "RankEntry": "traceset", "SerialExecutor": "traceset", "load_ranks": "traceset",
    "align_ranks": "align", "alignment_table": "align", "collective_table": "collectives",
    "collective_stats": "collectives", "stragglers": "stragglers", "RanksReport": "report",
    "build_ranks": "report", "combine": "report", "rank_summary": "report",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
