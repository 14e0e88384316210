"""The events of one plane's lines, from decoded columns into the TraceBuilder: times,
names, categories, metadata-level and event-level stats, polyprof's flow and counter
stats. Everything here is per column or per distinct name; only the rare polyprof
flow stats are read one by one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...trace.builder import TraceBuilder
from . import names as N
from .decode import EventColumns
from .stats import column, flow_in, flow_out, python_values, stat_value, typed

_SPECIAL = (N.STAT_CATEGORY, N.STAT_FLOW_OUT, N.STAT_FLOW_IN)
#: The kind code of the ``num_occurrences`` stat made from XEvent.data (an int64, not an XStat)
NOCC = 7


@dataclass
class PlaneMetadata:
    """A plane's event metadata: display names, and what applies to its events."""

    name: dict[int, str] = field(default_factory=dict)
    long: dict[int, str] = field(default_factory=dict)
    stats: dict[int, list[tuple[str, Any]]] = field(default_factory=dict)

    def unreferenced(self, plane: Any, mids: np.ndarray) -> list[dict[str, Any]]:
        """Event metadata that no event uses but that carries stats, as plain dicts."""
        used = set(np.unique(mids).tolist())
        out = []
        for mid, m in plane.event_metadata.items():
            mid = int(mid)
            if mid in used or mid not in self.stats:
                continue
            out.append({"id": mid, "name": m.name, "display_name": m.display_name,
                        "stats": {k: v for k, v in self.stats[mid]}})
        return sorted(out, key=lambda d: d["id"])  # map order is unspecified


class EventReader:
    """Adds the events of kept lines, plane by plane, and gathers their stats."""

    def __init__(self, b: TraceBuilder, cols: EventColumns, source: str):
        self.b = b
        self.cols = cols
        self.source = source
        self.stat_start = np.concatenate([[0], np.cumsum(cols.ev_stats)])
        self.value_kinds: dict[str, set[str]] = {}
        self.md_keys: set[str] = set()
        # key -> (rows per metadata id, the value, how many rows)
        self.md_parts: dict[str, tuple[list[np.ndarray], list[Any], list[int]]] = {}
        self.ev_parts: list[tuple[np.ndarray, ...]] = []  # (rows, key codes, kind, int, dbl, obj)
        self.key_code: dict[str, int] = {}
        self.flows_out: dict[int, tuple[int, int, str]] = {}
        self.flows_in: dict[int, int] = {}
        self.bad_flows = 0
        self.series: dict[tuple[int, str], tuple[list[int], list[float]]] = {}

    # ------------------------------------------------------------------ metadata
    def metadata(self, plane: Any, stat_names: dict[int, str]) -> PlaneMetadata:
        meta = PlaneMetadata()
        for mid, m in plane.event_metadata.items():
            mid = int(mid)
            meta.name[mid] = m.display_name or m.name
            if m.display_name and m.name and m.display_name != m.name:
                meta.long[mid] = m.name
            if m.stats:
                lst = []
                for st in m.stats:
                    which = st.WhichOneof("value")
                    if which:
                        key = stat_names.get(st.metadata_id, str(st.metadata_id))
                        lst.append((key, stat_value(st, which, stat_names)))
                        self.value_kinds.setdefault(key, set()).add(which)
                meta.stats[mid] = lst
                self.md_keys.update(k for k, _ in lst)
            if m.metadata:
                meta.stats.setdefault(mid, []).append(("xevent_metadata", bytes(m.metadata)))
            if m.child_id:
                meta.stats.setdefault(mid, []).append(("child_ids", ",".join(map(str, m.child_id))))
        return meta

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
        if not (meta.long or meta.stats):
            return
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
        for j, m in enumerate(uniq.tolist()):
            extra = meta.stats.get(m, [])
            if m in meta.long:
                extra = [*extra, (N.STAT_LONG_NAME, meta.long[m])]
            if not extra:
                continue
            rows = order[bounds[j]:bounds[j + 1]] + row0
            for key, val in extra:
                part = self.md_parts.setdefault(key, ([], [], []))
                part[0].append(rows)
                part[1].append(val)
                part[2].append(len(rows))

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
        starts = self.stat_start[idx]
        st_idx = np.repeat(starts - np.cumsum(n_st) + n_st, n_st) + np.arange(int(n_st.sum()))
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
            code = self.key_code[key] = len(self.key_code)
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
        for key, (rows_l, vals, counts) in self.md_parts.items():  # metadata-level first: event stats win
            b.add_stat(key, np.concatenate(rows_l), np.repeat(typed(vals), counts))
        if self.ev_parts:
            parts = [np.concatenate(p) for p in zip(*self.ev_parts)]
            rows, codes, kind, ints, dbls, objs = parts
            order = np.argsort(codes, kind="stable")
            rows, codes, kind, ints, dbls, objs = (a[order] for a in (rows, codes, kind, ints, dbls, objs))
            bounds = np.searchsorted(codes, np.arange(len(self.key_code) + 1))
            names = list(self.key_code)
            for code, key in enumerate(names):
                lo, hi = int(bounds[code]), int(bounds[code + 1])
                if lo == hi:
                    continue
                kinds = kind[lo:hi]
                b.add_stat(key, rows[lo:hi], column(kinds, ints[lo:hi], dbls[lo:hi], objs[lo:hi]))
                real = [x for x in np.unique(kinds).tolist() if x != NOCC]
                if real:
                    self.value_kinds.setdefault(key, set()).update(N.VALUE_KINDS[x] for x in real)
        for fk, (src, fid, fcat) in sorted(self.flows_out.items()):
            dst = self.flows_in.get(fk)
            if dst is not None:
                b.flow(src, dst, fid, fcat)
        for (pid, name), (t, v) in self.series.items():
            b.counter(pid, name, t, v)
        return {k: sorted(v) for k, v in self.value_kinds.items()}
