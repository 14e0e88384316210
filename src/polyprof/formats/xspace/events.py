"""The events of one plane's lines, from decoded columns into the TraceBuilder: times,
names, categories, metadata-level and event-level stats, polyprof's flow and counter
stats. Everything here is per column or per distinct name; only the rare polyprof
flow stats are read one by one."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...trace.builder import TraceBuilder
from . import names as N
from .decode import EventColumns, spans
from .metadata import PlaneMetadata, read_metadata
from .stats import column, flow_in, flow_out, python_values

_SPECIAL = (N.STAT_CATEGORY, N.STAT_FLOW_OUT, N.STAT_FLOW_IN)
#: The kind code of the ``num_occurrences`` stat made from XEvent.data (an int64, not an XStat)
NOCC = 7


class EventReader:
    """Adds the events of kept lines, plane by plane, and gathers their stats."""

    def __init__(self, b: TraceBuilder, cols: EventColumns, source: str):
        self.b = b
        self.cols = cols
        self.source = source
        self.stat_start = np.concatenate([[0], np.cumsum(cols.ev_stats)])
        self.ms_start = np.concatenate([[0], np.cumsum(cols.md_stats)])
        self.md_start = np.concatenate([[0], np.cumsum(cols.plane_mds)])
        self.value_kinds: dict[str, set[str]] = {}
        self.md_keys: set[str] = set()
        self.md_parts: list[tuple[np.ndarray, ...]] = []  # metadata-level: (rows, key codes, kind, int, dbl, obj)
        self.ev_parts: list[tuple[np.ndarray, ...]] = []  # the events' own, the same columns
        self.key_code: dict[str, int] = {}
        self.keys: list[str] = []
        self.flows_out: dict[int, tuple[int, int, str]] = {}
        self.flows_in: dict[int, int] = {}
        self.bad_flows = 0
        self.series: dict[tuple[int, str], tuple[list[int], list[float]]] = {}

    # ------------------------------------------------------------------ metadata
    def metadata(self, plane_index: int, stat_names: dict[int, str]) -> PlaneMetadata:
        m0, m1 = int(self.md_start[plane_index]), int(self.md_start[plane_index + 1])
        return read_metadata(self.cols, m0, m1, stat_names, self._code, self.keys, self.value_kinds, self.md_keys,
                             self.ms_start)

    # ------------------------------------------------------------------ events
    def plane_events(self, pid: int, lines: list[tuple[Any, ...]], meta: PlaneMetadata,
                     stat_names: dict[int, str]) -> None:
        """Add the events of ``lines`` ((index, e0, e1, track, base ns, name, category) each)."""
        if not lines:
            return
        c = self.cols
        counts = np.asarray([e1 - e0 for _, e0, e1, *_ in lines], np.int64)
        idx = np.concatenate([np.arange(e0, e1) for _, e0, e1, *_ in lines])
        off, dur = c.ev_off[idx], c.ev_dur[idx]
        bad = (off < -N.TIME_LIMIT_PS) | (off > N.TIME_LIMIT_PS) | (dur < 0) | (dur > N.TIME_LIMIT_PS)
        if bad.any():
            first = int(np.searchsorted(np.cumsum(counts), int(np.argmax(bad)), side="right"))
            raise TraceFormatError(self.source, f"line {lines[first][5]!r}: an event offset or duration is "
                                                "negative or beyond 2**62 ps")
        # absolute times in ns: start rounded down, end up, so nesting holds and no
        # event shorter than 1 ns turns into an instant
        base = np.repeat(np.asarray([ln[4] for ln in lines], np.int64), counts)
        q = off // 1000
        start = base + q
        end = base + q + (off - q * 1000 + dur + 999) // 1000
        mids = c.ev_mid[idx]
        uniq, inv = np.unique(mids, return_inverse=True)
        inv = inv.reshape(-1)
        name_ids = np.fromiter((self.b.intern(meta.name.get(m, "")) for m in uniq.tolist()), np.int32,
                               len(uniq))[inv]
        cats = np.repeat(np.asarray([self.b.intern(ln[6]) for ln in lines], np.int32), counts)
        tracks = np.repeat(np.asarray([ln[3] for ln in lines], np.int32), counts)
        row0 = self.b.n_events
        self._metadata_stats(row0, uniq, inv, meta)
        self._event_stats(idx, row0, cats, stat_names)
        self.b.events(tracks, name_ids, start, end - start, cats)

    def _metadata_stats(self, row0: int, uniq: np.ndarray, inv: np.ndarray, meta: PlaneMetadata) -> None:
        """Stats on event metadata, for every event of that metadata (one group per id)."""
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
        part = meta.stats_of(uniq, order, bounds, row0)
        if part is not None:
            self.md_parts.append(part)

    def _event_stats(self, idx: np.ndarray, row0: int, cats: np.ndarray, stat_names: dict[int, str]) -> None:
        """The stats of the events ``idx`` (rows from ``row0``): polyprof's own stats are
        applied here, the others kept as columns for :meth:`finish`."""
        c = self.cols
        n_st = c.ev_stats[idx]
        rows = np.arange(row0, row0 + len(idx), dtype=np.int64)
        nocc = c.ev_isnocc[idx]
        if nocc.any():  # XEvent.data = num_occurrences: a stat of its own, before the event's stats
            k = self._code("num_occurrences")
            sel = np.flatnonzero(nocc)
            self.ev_parts.append((rows[sel], np.full(len(sel), k, np.int64), np.full(len(sel), NOCC, np.uint8),
                                  c.ev_nocc[idx][sel], np.zeros(len(sel)), np.full(len(sel), None, object)))
        if not n_st.any():
            return
        st_idx = spans(self.stat_start[idx], n_st)
        st_rows = np.repeat(rows, n_st)
        kind = c.st_kind[st_idx]
        keep = kind != 0
        st_idx, st_rows, kind = st_idx[keep], st_rows[keep], kind[keep]
        mids = c.st_mid[st_idx]
        umid, minv = np.unique(mids, return_inverse=True)
        keys_ = [stat_names.get(m, str(m)) for m in umid.tolist()]
        codes = np.asarray([self._code(k) for k in keys_], np.int64)[minv.reshape(-1)]
        objs = c.st_obj[st_idx]
        refs = kind == 6
        if refs.any():
            objs = objs.copy()
            objs[refs] = [stat_names.get(int(v) & ((1 << 64) - 1), "") for v in c.st_int[st_idx][refs].tolist()]
        ints, dbls = c.st_int[st_idx], c.st_dbl[st_idx]
        special = np.isin(codes, [self.key_code[s] for s in _SPECIAL if s in self.key_code])
        if special.any():
            self._special(codes[special], st_rows[special], kind[special], ints[special], dbls[special],
                          objs[special], cats, row0)
            plain = ~special
            st_rows, codes, kind, ints, dbls, objs = (st_rows[plain], codes[plain], kind[plain], ints[plain],
                                                      dbls[plain], objs[plain])
        self.ev_parts.append((st_rows, codes, kind, ints, dbls, objs))

    def _code(self, key: str) -> int:
        code = self.key_code.get(key)
        if code is None:
            code = self.key_code[key] = len(self.keys)
            self.keys.append(key)
        return code

    def _special(self, codes: np.ndarray, rows: np.ndarray, kind: np.ndarray, ints: np.ndarray,
                 dbls: np.ndarray, objs: np.ndarray, cats: np.ndarray, row0: int) -> None:
        """polyprof's category and flow stats (files polyprof wrote)."""
        is_cat = codes == self.key_code.get(N.STAT_CATEGORY, -1)
        if is_cat.any():
            sel = np.flatnonzero(is_cat)
            if (kind[sel] == 4).all():  # as polyprof writes it: text
                text = objs[sel]
            else:
                text = np.asarray([str(v) for v in python_values(kind[sel], ints[sel], dbls[sel], objs[sel])],
                                  object)
            cats[rows[sel] - row0] = self.b.intern_many(text)
        sel = np.flatnonzero(~is_cat)
        if not len(sel):
            return
        vals = python_values(kind[sel], ints[sel], dbls[sel], objs[sel])
        out_code = self.key_code.get(N.STAT_FLOW_OUT, -1)
        for i, code, row in zip(range(len(sel)), codes[sel].tolist(), rows[sel].tolist()):
            if code == out_code:
                flow = flow_out(vals[i])
                if flow is None:
                    self.bad_flows += 1
                else:
                    self.flows_out[flow[0]] = (row, flow[1], flow[2])
                continue
            k = flow_in(vals[i])
            if k is None:
                self.bad_flows += 1
            else:
                self.flows_in[k] = row

    def counters(self, pid: int, e0: int, e1: int, base_ns: int, meta: PlaneMetadata,
                 stat_names: dict[int, str]) -> None:
        """Counter samples polyprof wrote as instant events with a value stat."""
        if abs(base_ns) > N.TIME_LIMIT_NS or e1 == e0:
            return
        c = self.cols
        value_id = [m for m, k in stat_names.items() if k == N.STAT_COUNTER_VALUE]
        ts = (base_ns + c.ev_off[e0:e1] // 1000).tolist()
        for i, e in enumerate(range(e0, e1)):
            value = 0.0
            for s in range(int(self.stat_start[e]), int(self.stat_start[e + 1])):
                if int(c.st_mid[s]) in value_id:
                    value = float(c.st_dbl[s]) if c.st_kind[s] == 1 else 0.0
            t, v = self.series.setdefault((pid, meta.name.get(int(c.ev_mid[e]), "")), ([], []))
            t.append(ts[i])
            v.append(value)

    # ------------------------------------------------------------------ the end
    def finish(self) -> dict[str, list[str]]:
        """Hand the gathered stats, flows and counters to the builder; returns the XStat
        value kinds seen per key."""
        b = self.b
        self._add(self.md_parts, kinds=False)  # metadata-level first: the events' own stats win
        self._add(self.ev_parts, kinds=True)
        for fk, (src, fid, fcat) in sorted(self.flows_out.items()):
            dst = self.flows_in.get(fk)
            if dst is not None:
                b.flow(src, dst, fid, fcat)
        for (pid, name), (t, v) in self.series.items():
            b.counter(pid, name, t, v)
        return {k: sorted(v) for k, v in self.value_kinds.items()}

    def _add(self, parts: list[tuple[np.ndarray, ...]], kinds: bool) -> None:
        """Stat columns, key by key, from (rows, key codes, kind, int, dbl, obj) parts."""
        if not parts:
            return
        rows, codes, kind, ints, dbls, objs = (np.concatenate(p) for p in zip(*parts))
        order = np.argsort(codes, kind="stable")
        rows, codes, kind, ints, dbls, objs = (a[order] for a in (rows, codes, kind, ints, dbls, objs))
        bounds = np.searchsorted(codes, np.arange(len(self.keys) + 1))
        for code, key in enumerate(self.keys):
            lo, hi = int(bounds[code]), int(bounds[code + 1])
            if lo == hi:
                continue
            k = kind[lo:hi]
            self.b.add_stat(key, rows[lo:hi], column(k, ints[lo:hi], dbls[lo:hi], objs[lo:hi]))
            real = [x for x in np.unique(k).tolist() if x != NOCC] if kinds else []
            if real:
                self.value_kinds.setdefault(key, set()).update(N.VALUE_KINDS[x] for x in real)
