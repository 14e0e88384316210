"""Many ranks of one job: rank sources (files, a directory, a store, Traces, captures),
per-rank work on an executor, the job report (alignment from collectives, collective
statistics, stragglers), and conversion to a store (docs/ranks.md).

Names are imported on first use, so ``import polyprof`` stays cheap."""

from __future__ import annotations

from .._lazy import lazy_names

_WHERE = {
    "TraceSet": "traceset", "RankEntry": "sources", "load_ranks": "traceset", "load_rank": "sources",
    "RankSource": "sources", "TraceFile": "sources", "StoreRank": "sources", "InMemory": "sources",
    "resolve": "sources", "assign_ranks": "sources",
    "SerialExecutor": "executor", "LocalPool": "executor",
    "RankResult": "result", "rank_summary": "result",
    "JobReport": "report", "job_report": "report", "job_tables": "report",
    "with_rank": "stack",
    "align_ranks": "align", "alignment_table": "align", "collective_table": "collectives",
    "collective_stats": "collectives", "stragglers": "stragglers",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)
