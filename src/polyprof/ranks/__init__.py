"""Many ranks of one job: identity, per-rank work on an executor, clock alignment from
collectives, collective statistics and stragglers (docs/ranks.md)."""

from .align import align_ranks, alignment_table
from .collectives import collective_stats, collective_table
from .report import RanksReport, build_ranks, combine, rank_summary
from .stragglers import stragglers
from .traceset import RankEntry, SerialExecutor, TraceSet, load_ranks

__all__ = ["TraceSet", "RankEntry", "SerialExecutor", "load_ranks", "align_ranks", "alignment_table",
           "collective_table", "collective_stats", "stragglers", "RanksReport", "build_ranks", "combine",
           "rank_summary"]
