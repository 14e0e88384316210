"""The events of one plane's lines, from decoded columns into the TraceBuilder: times,
names, categories, metadata-level and event-level stats, polyprof's flow and counter
stats. Everything here is per column or per distinct name; only the rare polyprof
flow stats are read one by one."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...trace import keys as K
from ...trace.builder import TraceBuilder
from ...trace.sorting import member, unique, unique_inverse
from . import gpu, names as N
from .decode import EventColumns, spans, stat_objects
from .deferred import DeferredStats, EventPart, MetadataPart
from .metadata import PlaneMetadata, read_metadata
from .stats import flow_in, flow_out, python_values

_SPECIAL = (N.STAT_CATEGORY, N.STAT_FLOW_OUT, N.STAT_FLOW_IN)
#: The kind code of the ``num_occurrences`` stat made from XEvent.data (an int64, not an XStat)
NOCC = 7


class EventReader:
    """Adds the events of kept lines, plane by plane, and notes where their stats are
    (``deferred.py`` builds the columns when asked); polyprof's own category and flow
    stats are applied here."""

    def __init__(self, b: TraceBuilder, cols: EventColumns, source: str):
        self.b = b
        self.cols = cols
        self.source = source
        self.stat_start = np.concatenate([[0], np.cumsum(cols.ev_stats)])
        self.ms_start = np.concatenate([[0], np.cumsum(cols.md_stats)])
        self.md_start = np.concatenate([[0], np.cumsum(cols.plane_mds)])
        self.value_kinds: dict[str, set[str]] = {}
        self.ev_kinds: dict[int, set[str]] = {}  # key code -> value kinds of the events' own stats
        self.md_keys: set[str] = set()
        self.md_parts: list[MetadataPart] = []  # metadata-level stats, plane by plane
        self.ev_parts: list[EventPart] = []  # the events' own
        self.key_code: dict[str, int] = {}
        self.keys: list[str] = []
        self.flows_out: dict[int, tuple[int, int, str]] = {}
        self.flows_in: dict[int, int] = {}
        self.bad_flows = 0
        self.backwards = 0  # events whose duration is negative, read as 0 ns long
        self.series: dict[tuple[int, str], tuple[list[int], list[float]]] = {}
        self.rows = 0  # the events read so far (their rows in the trace)
        self.pending: list[tuple[np.ndarray, ...]] = []  # their columns, given to the builder at once
        self.stream_parts: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, stream ids) of XLA's GPU activity

    # ------------------------------------------------------------------ metadata
    def metadata(self, plane_index: int, stat_names: dict[int, str]) -> PlaneMetadata:
        m0, m1 = int(self.md_start[plane_index]), int(self.md_start[plane_index + 1])
        return read_metadata(self.cols, m0, m1, stat_names, self._code, self.keys, self.value_kinds, self.md_keys,
                             self.ms_start)

    # ------------------------------------------------------------------ events
    def plane_events(self, pid: int, lines: list[tuple[Any, ...]], meta: PlaneMetadata,
                     stat_names: dict[int, str], drop: frozenset[str] = frozenset()) -> None:
        """Add the events of ``lines`` ((index, e0, e1, track, base ns, name, category[, mixed,
        stream id]) each; mixed: a GPU stream line whose events' categories come from their
        stats; stream id: its number, the ``stream`` of its kernels, copies and fills);
        ``drop``: keys of the events' own stats left out (a polyprof writer added them to
        this plane only)."""
        if not lines:
            return
        c = self.cols
        counts = np.asarray([e1 - e0 for _, e0, e1, *_ in lines], np.int64)
        idx = spans(np.asarray([ln[1] for ln in lines], np.int64), counts)
        off, dur = c.ev_off[idx], c.ev_dur[idx]  # (copies: changed in place below)
        # a negative offset is a time before the line's timestamp, kept (its time is the
        # line's plus the offset); beyond +-2**62 ps is damage, refused, as every reader
        # refuses or drops such times
        bad = (off < -N.TIME_LIMIT_PS) | (off > N.TIME_LIMIT_PS) | (dur > N.TIME_LIMIT_PS)
        if bad.any():
            first = int(np.searchsorted(np.cumsum(counts), int(np.argmax(bad)), side="right"))
            raise TraceFormatError(self.source, f"line {lines[first][5]!r}: an event offset or duration is "
                                                "beyond +-2**62 ps")
        del bad
        back = np.flatnonzero(dur < 0)  # an event that ends before it starts: kept at its start, 0 ns long
        if len(back):  # (said: reader.finish)
            self.backwards += len(back)
            np.maximum(dur, 0, out=dur)
        # absolute times in ns: start rounded down, end up, so nesting holds and no
        # event shorter than 1 ns turns into an instant; in place, one column at a time
        # (a big plane's temporaries are the load's peak)
        start = np.repeat(np.asarray([ln[4] for ln in lines], np.int64), counts)
        start += np.floor_divide(off, 1000)
        if len(start) and (start.min() < -N.TIME_LIMIT_NS or start.max() > N.TIME_LIMIT_NS):
            first = int(np.searchsorted(np.cumsum(counts), int(np.argmax(np.abs(start) > N.TIME_LIMIT_NS)),
                                        side="right"))
            raise TraceFormatError(self.source, f"line {lines[first][5]!r}: an event starts beyond +-2**62 ns "
                                                "(its line's timestamp plus its offset)")
        np.remainder(off, 1000, out=off)  # the sub-ns part of the start, which the end rounds up
        off += dur
        off += 999
        length = np.floor_divide(off, 1000, out=off)
        length[back] = 0  # (not the 1 ns a sub-ns start rounds a 0 ps event up to)
        del dur
        with_stats = len(meta.table[0]) > 0  # metadata-level stats to spread over the events
        if with_stats:
            uniq, inv, order, bounds = grouped(c.ev_mid[idx])
        else:  # a plane whose metadata has no stats adds none to its events: the names only
            uniq, inv = unique_inverse(c.ev_mid[idx])
        name_ids = np.fromiter((self.b.intern(meta.name.get(m, "")) for m in uniq.tolist()), np.int32,
                               len(uniq))[inv]
        cats = np.repeat(np.asarray([self.b.intern(ln[6]) for ln in lines], np.int32), counts)
        mixed = [k for k, ln in enumerate(lines) if len(ln) > 7 and ln[7]]
        line_at = np.concatenate([[0], np.cumsum(counts)])  # (not the groups' bounds, kept for the part below)
        if mixed:  # GPU stream lines of several kinds: each event's own stats say which
            rows = np.concatenate([np.arange(line_at[k], line_at[k + 1]) for k in mixed])
            gpu.refine_mixed(c, self.stat_start, idx, cats, rows, meta, stat_names, self.b.intern)
        streams = [(k, ln[8]) for k, ln in enumerate(lines) if len(ln) > 8 and ln[8] is not None]
        if streams:  # the stream of XLA's GPU activity: its line's id
            self._streams(line_at, streams, cats, self.rows)
        tracks = np.repeat(np.asarray([ln[3] for ln in lines], np.int32), counts)
        row0 = self.rows
        if with_stats:
            self.md_parts.append(MetadataPart(meta.table, uniq, order, bounds, row0))
        self._event_stats(idx, row0, cats, stat_names, drop)
        self.pending.append((tracks, name_ids, start, length, cats))
        self.rows += len(idx)

    def _streams(self, line_at: np.ndarray, streams: list[tuple[int, int]], cats: np.ndarray, row0: int) -> None:
        """The ``stream`` stat of the kernels, copies and fills (``gpu.STREAM_CATEGORIES``)
        of the ``streams`` lines ((line k, stream id) each) of a plane whose rows start at ``row0``."""
        ks = np.asarray([k for k, _ in streams], np.int64)
        n = line_at[ks + 1] - line_at[ks]
        at = spans(line_at[ks], n)
        sid = np.repeat(np.asarray([s for _, s in streams], np.int64), n)
        there = cats[at]
        ids = [c for c in unique(there).tolist() if self.b.strings[c] in gpu.STREAM_CATEGORIES]
        busy = member(there, np.asarray(ids, there.dtype))
        if busy.any():
            self.stream_parts.append((at[busy] + row0, sid[busy]))

    def _event_stats(self, idx: np.ndarray, row0: int, cats: np.ndarray, stat_names: dict[int, str],
                     drop: frozenset[str] = frozenset()) -> None:
        """Where the stats of the events ``idx`` (rows from ``row0``) are; polyprof's own
        stats are applied here."""
        c = self.cols
        n_st = c.ev_stats[idx]
        rows = np.arange(row0, row0 + len(idx), dtype=np.int64)
        is_nocc = c.ev_isnocc[idx]
        nocc = None
        if is_nocc.any():  # XEvent.data = num_occurrences: a stat of its own, before the event's stats
            sel = np.flatnonzero(is_nocc)
            nocc = (rows[sel], c.ev_nocc[idx][sel])
        nocc_code = self._code("num_occurrences") if nocc is not None else -1
        # kept with the trace (EventPart) as int32 where they fit: a stat's position, its
        # key code, each event's first stat (POLYPROF_MAX_EVENTS may allow more than 2**31
        # events); a stat's event row is found from the first stats, not made per stat,
        # unless the events are out of file order (never, as the reader reads lines)
        first = self.stat_start[idx]
        ordered = not len(first) or bool((first[1:] >= first[:-1]).all())
        st_idx = spans(first, n_st, np.int32)
        st_rows = None if ordered else np.repeat(rows.astype(np.int32 if row0 + len(idx) < 2**31 else np.int64), n_st)
        del rows, n_st
        kind = c.st_kind[st_idx]
        unset = kind == 0
        if unset.any():
            keep = np.flatnonzero(~unset)
            st_idx, kind, st_rows = st_idx[keep], kind[keep], None if st_rows is None else st_rows[keep]
        del unset
        codes = self._codes_of(c.st_mid, st_idx, stat_names)
        if drop:
            kept = np.flatnonzero(~member(codes, np.asarray([self.key_code.get(k, -1) for k in drop], np.int64)))
            st_idx, kind, codes = st_idx[kept], kind[kept], codes[kept]
            st_rows = None if st_rows is None else st_rows[kept]
        special = member(codes, np.asarray([self.key_code[s] for s in _SPECIAL if s in self.key_code], np.int64))
        if special.any():
            sp = st_idx[special]
            sp_rows = np.searchsorted(first, sp, side="right") - 1 + row0 if st_rows is None else st_rows[special]
            self._special(codes[special], sp_rows, kind[special], c.st_int[sp], c.st_text, stat_names, cats, row0)
            del sp, sp_rows
            plain = ~special
            st_idx, codes, kind = st_idx[plain], codes[plain], kind[plain]
            st_rows = None if st_rows is None else st_rows[plain]
        del special
        present: set[int] = set()  # the key codes this plane's events have
        if len(codes):  # the XStat value kinds of each key, for metadata[mkeys.XSPACE]
            pairs = np.flatnonzero(_pair_counts(codes, kind))
            for code, k in zip((pairs // 8).tolist(), (pairs % 8).tolist()):
                self.ev_kinds.setdefault(code, set()).add(N.VALUE_KINDS[k])
                present.add(code)
        small = not len(first) or first[-1] < 2**31
        self.ev_parts.append(EventPart(st_idx, first.astype(np.int32 if small else np.int64) if ordered else None,
                                       st_rows, row0, codes, stat_names, nocc, nocc_code, present))

    def _codes_of(self, st_mid: np.ndarray, at: np.ndarray, stat_names: dict[int, str],
                  chunk: int = 1 << 20) -> np.ndarray:
        """The key code (int32) of the stat metadata id ``st_mid[at]`` of each stat: through
        a table over the ids where they are small (as XLA numbers them), a chunk of stats
        at a time (no int64 copy of a big plane's ids), else by sorting."""
        if not len(at):
            return np.zeros(0, np.int32)
        parts = range(0, len(at), chunk)
        lo = min(int(st_mid[at[a:a + chunk]].min()) for a in parts)
        hi = max(int(st_mid[at[a:a + chunk]].max()) for a in parts)
        if lo < 0 or hi > max(1 << 16, 4 * len(at)):
            umid, minv = unique_inverse(st_mid[at])
            return np.asarray([self._code(stat_names.get(m, str(m))) for m in umid.tolist()], np.int32)[minv]
        count = np.zeros(hi + 1, np.int64)
        for a in parts:
            count += np.bincount(st_mid[at[a:a + chunk]], minlength=hi + 1)
        seen = np.flatnonzero(count)
        lut = np.zeros(hi + 1, np.int32)
        lut[seen] = [self._code(stat_names.get(m, str(m))) for m in seen.tolist()]
        out = np.empty(len(at), np.int32)
        for a in parts:
            out[a:a + chunk] = lut[st_mid[at[a:a + chunk]]]
        return out

    def _code(self, key: str) -> int:
        code = self.key_code.get(key)
        if code is None:
            code = self.key_code[key] = len(self.keys)
            self.keys.append(key)
        return code

    def _special(self, codes: np.ndarray, rows: np.ndarray, kind: np.ndarray, ints: np.ndarray,
                 texts: np.ndarray, stat_names: dict[int, str], cats: np.ndarray, row0: int) -> None:
        """polyprof's category and flow stats (files polyprof wrote): ``kind`` and ``ints``
        as ``EventColumns``' st_kind and st_int (texts: st_text)."""
        dbls = ints.view(np.float64)

        def values(sel: np.ndarray) -> list[Any]:
            k, v = kind[sel], ints[sel]
            objs = stat_objects(k, v, texts)
            refs = np.flatnonzero(k == 6)
            if len(refs):
                objs[refs] = [stat_names.get(r & ((1 << 64) - 1), "") for r in v[refs].tolist()]
            return python_values(k, v, dbls[sel], objs)

        is_cat = codes == self.key_code.get(N.STAT_CATEGORY, -1)
        if is_cat.any():
            sel = np.flatnonzero(is_cat)
            if (kind[sel] == 4).all():  # as polyprof writes it: text (the few values shared, not copied)
                cats[rows[sel] - row0] = self.b.intern_many(texts[ints[sel]])
            else:
                cats[rows[sel] - row0] = self.b.intern_many(np.asarray([str(v) for v in values(sel)], object))
        sel = np.flatnonzero(~is_cat)
        if not len(sel):
            return
        vals = values(sel)
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
    def finish(self, drop: set[str]) -> tuple[dict[str, list[str]], DeferredStats]:
        """Hand the flows and counters to the builder, and the stats of :data:`deferred.EAGER`
        (the others: the returned :class:`DeferredStats`, to defer once the trace is
        built; ``drop``: keys left out). Returns the XStat value kinds seen per key too."""
        b = self.b
        if self.pending:  # every plane's events in one call: one chunk of columns
            tracks, names, start, dur, cats = (np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*self.pending))
            b.events(tracks, names, start, dur, cats, copy=False)  # made here, not changed after
            self.pending = []
        stats = DeferredStats(self.cols, self.keys, self.md_parts, self.ev_parts, drop)
        for code in sorted(self.ev_kinds):  # after the metadata-level ones, as columns were added
            self.value_kinds.setdefault(self.keys[code], set()).update(self.ev_kinds[code])
        for key, parts in stats.eager().items():  # joined by the builder, as _build would
            for rows, values in parts:
                b.add_stat(key, rows, values)
        if self.stream_parts and not stats.has(K.STREAM):  # a file's own stream stat (stream_id) wins
            b.add_stat(K.STREAM, *(np.concatenate(c) for c in zip(*self.stream_parts)))
        for fk, (src, fid, fcat) in sorted(self.flows_out.items()):
            dst = self.flows_in.get(fk)
            if dst is not None:
                b.flow(src, dst, fid, fcat)
        for (pid, name), (t, v) in self.series.items():
            b.counter(pid, name, t, v)
        return {k: sorted(v) for k, v in self.value_kinds.items()}, stats


def _pair_counts(codes: np.ndarray, kind: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """``np.bincount(codes * 8 + kind)`` (codes are small: no sort), a chunk at a time:
    bincount's int64 operand for every stat of a big plane was the read's peak."""
    out = np.zeros(0, np.int64)
    for a in range(0, len(codes), chunk):
        part = np.bincount(codes[a:a + chunk].astype(np.int64) * 8 + kind[a:a + chunk])
        if len(part) > len(out):
            part[:len(out)] += out
            out = part
        else:
            out[:len(part)] += part
    return out


def grouped(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` and the rows grouped by value: (distinct
    values ascending, each row's group, the rows in group order (stable), group bounds
    in that order). Metadata ids are small, so they are sorted as uint16 where they fit:
    NumPy's stable sort of 16-bit values is a radix sort, faster than
    sorting int64."""
    v = np.asarray(values, np.int64)
    small = len(v) and int(v.min()) >= 0 and int(v.max()) < 1 << 16
    order = np.argsort(v.astype(np.uint16) if small else v, kind="stable")
    s = v[order]
    first = np.ones(len(s), bool)
    np.not_equal(s[1:], s[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    bounds = np.append(starts, len(s))
    inv = np.empty(len(v), np.intp)
    inv[order] = np.repeat(np.arange(len(starts)), np.diff(bounds))
    return s[starts], inv, order, bounds
