"""Correlation ids, external ids and flow ids made unique per source for an export.

A trace of several sources (the processes of an MPI Nsight Systems report, a merged
rocpd, rank traces merged) keeps each source's ids as its profiler numbered them, and
they collide: CUPTI numbers each process's API calls from 1, so two ranks both have a
``cudaLaunchKernel`` of correlation id 140. polyprof matches ids within a source
(``derive/correlate._scoped``); an exported file is read back as one source, by
polyprof's readers as by HTA, Perfetto or XProf, so its ids must be unique in the file.
The writers (Kineto, Chrome, Perfetto, XSpace) give the ids of source ``k`` ``k *
stride`` more, ``stride`` the first power of ten above every id (source 1's id 140 of a
trace whose ids end below 1,000 is 1140): the same (source, id) is the same id in every
column, so a launch, its device work and the flow between them still share one id.
Where that would pass 2**53 - 1 (a JavaScript number's exact integers: Perfetto's and
Chrome's JSON import), the (source, id) pairs are numbered 1, 2, ... instead. Ids of 0
or less stay as they are (CUPTI's 0: work no API call made). A trace of one source, or
whose sources' ids do not meet, is written with its ids unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace import keys
from .jsonfile import EXACT_IN_JS

if TYPE_CHECKING:
    from ..trace.core import Trace
    from ..trace.stats import StatColumn

#: the stats that link events by id within a source
ID_KEYS = (keys.CORRELATION_ID, keys.EXTERNAL_ID)


class SourceIds:
    """The ids a writer writes for a trace: :meth:`values` of an id column, ``flow_ids``
    (per flow, aligned with ``trace.flows``)."""

    def __init__(self, trace: Trace):
        self.columns: dict[str, np.ndarray] = {}  # key -> its values, made unique (only keys changed)
        self.flow_ids: np.ndarray = trace.flows["id"]
        if len(trace.sources) < 2:
            return
        es = trace.event_sources().astype(np.int64) if trace.n_events else np.zeros(0, np.int64)
        parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # name -> (source, id) of each value
        for key in ID_KEYS:
            col = trace.stats.get(key)
            if col is None or col.kind not in "iu" or not len(col.values):
                continue
            if col.kind == "u" and int(col.values.max()) >= 2 ** 63:
                continue  # (no offset fits: left as it is)
            parts[key] = (es[col.rows], col.values.astype(np.int64))
        fl = trace.flows
        if len(fl["src"]):
            parts[""] = (es[fl["src"]], fl["id"].astype(np.int64))
        if not any(_shared(s, v, len(trace.sources)) for s, v in parts.values()):
            return
        top = max(int(v.max()) for _, v in parts.values())
        stride = 10 ** len(str(max(top, 1)))
        if (len(trace.sources) - 1) * stride + top <= EXACT_IN_JS:
            made = {k: np.where(v > 0, v + s * stride, v) for k, (s, v) in parts.items()}
        else:
            made = _numbered(parts)
        for k, v in made.items():
            if k:
                self.columns[k] = v.astype(trace.stats[k].values.dtype) if (v >= 0).all() else v
            else:
                self.flow_ids = v

    def values(self, key: str, col: StatColumn) -> np.ndarray:
        """The values to write of stat ``key``'s column ``col``."""
        return self.columns.get(key, col.values)


def _shared(source: np.ndarray, ids: np.ndarray, n_sources: int) -> bool:
    """Whether some id > 0 is held by events of two sources."""
    pos = ids > 0
    if not pos.any():
        return False
    ids, source = ids[pos], source[pos]
    if int(ids.max()) < (1 << 62) // n_sources:  # each pair as one integer: a plain sort
        pairs = np.unique(ids * n_sources + source)
        return bool(len(pairs) > len(np.unique(pairs // n_sources)))
    pairs = np.unique(np.stack([ids, source], axis=1), axis=0)
    return bool(len(pairs) > len(np.unique(pairs[:, 0])))


def _numbered(parts: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every (source, id > 0) pair of every part numbered 1, 2, ... (the same pair the
    same number in every part); ids of 0 or less kept."""
    names = list(parts)
    src = np.concatenate([parts[k][0] for k in names])
    ids = np.concatenate([parts[k][1] for k in names])
    pos = ids > 0
    out = ids.copy()
    if pos.any():
        _, code = np.unique(np.stack([src[pos], ids[pos]], axis=1), axis=0, return_inverse=True)
        out[pos] = code.reshape(-1) + 1
    at = np.cumsum([0, *(len(parts[k][1]) for k in names)])
    return {k: out[at[i]:at[i + 1]] for i, k in enumerate(names)}
