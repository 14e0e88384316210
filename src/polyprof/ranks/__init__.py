"""Many ranks of one job: identity, per-rank work on an executor, clock alignment from
collectives, collective statistics and stragglers (docs/ranks.md).

Names are imported on first use, so ``import polyprof`` stays free of pandas."""

from __future__ import annotations

from .._lazy import lazy_names

_WHERE = {
    "TraceSet": "traceset", "RankEntry": "traceset", "SerialExecutor": "traceset", "load_ranks": "traceset",
    "align_ranks": "align", "alignment_table": "align", "collective_table": "collectives",
    "collective_stats": "collectives", "stragglers": "stragglers", "RanksReport": "report",
    "build_ranks": "report", "combine": "report", "rank_summary": "report",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)
