"""Per-rank summary work that keeps a store's rank to the memory bound: the rank is
summarised window by window (``ranks/stepwise.py``) when it is above the bound
(``ranks/fits.py``), and read whole otherwise. Light at import: the windows' machinery
is imported only for a rank above the bound."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from . import fits
from .sources import RankEntry, StoreRank

if TYPE_CHECKING:
    from ..trace.core import Trace
    from .result import RankResult


class Summary:
    """``rank_summary`` of each rank (called with its Trace), but a store's rank above the
    memory bound is summarised window by window from its files (``by_entry``), where its
    steps allow."""

    def __init__(self, fn: Callable[[Trace], RankResult]):
        self.fn = fn

    def __call__(self, trace: Trace) -> RankResult:
        return self.fn(trace)

    def by_entry(self, entry: RankEntry) -> RankResult | None:
        """The rank's result without loading it whole, or None to load it (``_run_on``)."""
        src = entry.source
        if not isinstance(src, StoreRank) or (src.events and fits.store_rank_bytes(src.events) <= fits.memory_bound()):
            return None
        from .stepwise import summarise_entry  # the windows' machinery: only for a rank above the bound

        return summarise_entry(entry)
