"""Decoded CUPTI records -> one Trace on the session clock.

- device activity (kernels, copies, fills, synchronisation) on ``/device:GPU:<id>``,
  one track per stream; kernels with grid, block, registers per thread, shared memory,
  context, graph id and graph node id (Kineto's arg names, so analyses read CUPTI's
  kernels and Kineto's alike);
- CUDA runtime and driver calls on the thread that made them (``cuda_runtime`` /
  ``cuda_driver``), with a flow to the device activity of the same correlation id;
- NVTX ranges (push/pop, start/end) as ``user_annotation`` ranges on their thread: polyprof
  sections, projected onto the device activity their launches caused; NVTX marks as
  marks;
- external correlation ids (what a framework pushed around its launches) on the calls
  and the activity they caused;
- unified-memory transfers and faults (when enabled) on a "Unified Memory" track.

Times: CUPTI's timestamps through the clock fit (clock.py); each device activity keeps
its duration on CUPTI's clock.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

import numpy as np

from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.clock import ClockFit
from ...trace.core import Trace
from ...trace.sorting import unique_rows
from . import decode, layout
from .buffers import Records

CAT_RUNTIME, CAT_DRIVER, CAT_SYNC, CAT_ANNOTATION = "cuda_runtime", "cuda_driver", "cuda_sync", "user_annotation"
CAT_UNIFIED = "unified_memory"

# stats, named as Kineto names the same kernel args
REGISTERS = "registers per thread"
SHARED_MEMORY = "shared memory"
CONTEXT = "context"
BLOCKS_PER_SM = "blocks per SM"
WARPS_PER_SM = "warps per SM"
GRAPH_ID = "graph id"
GRAPH_NODE_ID = "graph node id"
COPY_KIND = "copy kind"
SRC_KIND = "src kind"
DST_KIND = "dst kind"
NVTX_DOMAIN = "nvtx_domain"
EXTERNAL_KIND = "external kind"

NO_STREAM = 0xFFFFFFFF  # a context-wide synchronisation's stream id
_VERSION = re.compile(r"_v\d+$")


@functools.lru_cache(maxsize=2)
def api_names(driver: bool) -> dict[int, str]:
    """cbid -> function name (``cudaLaunchKernel``), from cupti-python's enums of
    ``cupti_runtime_cbid.h`` / ``cupti_driver_cbid.h``, without the ``_v7000`` suffix."""
    try:
        from cupti import cupti as binding
    except ImportError:
        return {}
    enum = binding.driver_api_trace_cbid if driver else binding.runtime_api_trace_cbid
    return {int(m.value): _VERSION.sub("", m.name) for m in enum}


def _dims(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """'x,y,z' texts, made once per distinct triple."""
    if not len(x):
        return np.zeros(0, object)
    uniq, _, inv = unique_rows(x, y, z)
    texts = np.empty(len(uniq), object)
    texts[:] = [f"{a},{b},{c}" for a, b, c in uniq.tolist()]
    return texts[inv]


def _labels(values: np.ndarray, table: dict[int, str]) -> np.ndarray:
    uniq, inv = np.unique(values, return_inverse=True)
    out = np.empty(len(uniq), object)
    out[:] = [table.get(int(v), str(int(v))) for v in uniq.tolist()]
    return out[inv.reshape(-1)]


class Converter:
    """One session's records into a TraceBuilder (``build()``)."""

    def __init__(self, rec: Records, fit: ClockFit, *, pid: int | None = None,
                 threads: dict[int, str] | None = None, demangle: bool = True) -> None:
        self.rec = rec
        self.fit = fit
        self.pid = os.getpid() if pid is None else pid
        self.threads = dict(threads or {})
        self.demangle = demangle
        self.b = TraceBuilder()
        self.host = self.b.plane(keys.HOST_PLANE, "host", pid=self.pid)
        self.devices: dict[int, dict[str, Any]] = {}
        self.context_device: dict[int, int] = {}
        # correlation id -> external id (and its kind), from EXTERNAL_CORRELATION records
        self.ext_corr = np.zeros(0, np.int64)
        self.ext_id = np.zeros(0, np.int64)
        self.ext_kind = np.zeros(0, np.int64)
        self.counts: dict[str, int] = {}
        self._device_rows: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, correlation ids)
        self._api_rows: list[tuple[np.ndarray, np.ndarray]] = []

    # ------------------------------------------------------------------ helpers
    def _time(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = self.fit.to_host(start.astype(np.int64))
        e = self.fit.to_host(end.astype(np.int64))
        return s, np.where(end > start, e - s, 0)

    def _timed(self, what: str, c: dict[str, np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records of ``rows`` that have a start time, and those still running when
        CUPTI flushed (end 0: kept with no duration, stat ``incomplete``). A record with
        no start (a forced flush of work not begun) has no place in time: counted, dropped."""
        keep = c["start"] != 0
        dropped = int((~keep).sum())
        if dropped:
            self.counts[f"{what}_without_start"] = dropped
            for k in list(c):
                c[k] = c[k][keep]
            rows = rows[keep]
        return rows, c["end"] < c["start"]

    def _incomplete(self, out: np.ndarray, open_: np.ndarray) -> None:
        if open_.any():
            self.b.add_stat(keys.INCOMPLETE, out[open_], np.ones(int(open_.sum()), np.int64))

    def _rows(self, *kinds: int) -> np.ndarray:
        return decode.rows_of(self.rec, kinds)

    def _plane(self, device: int) -> int:
        info = self.devices.get(device, {})
        return self.b.plane(keys.device_plane("GPU", device), "device", vendor="NVIDIA", index=device,
                            pid=1_000_000 + device, properties=info)

    def _stream_tracks(self, device: np.ndarray, stream: np.ndarray, context: np.ndarray) -> np.ndarray:
        """The (device, stream) track of each activity."""
        if not len(device):
            return np.zeros(0, np.int32)
        uniq, first, inv = unique_rows(device, stream)
        tracks = np.empty(len(uniq), np.int32)
        for i, ((dev, st), f) in enumerate(zip(uniq.tolist(), first.tolist())):
            plane = self._plane(dev)
            if st == NO_STREAM:
                tracks[i] = self.b.track(plane, "Context Sync", "stream", tid=-1)
            else:
                tracks[i] = self.b.track(plane, f"Stream {st}", "stream", tid=st,
                                         properties={"context": int(context[f])})
        return tracks[inv.reshape(-1)]

    def _note_contexts(self, context: np.ndarray, device: np.ndarray) -> None:
        """Which device each context is on (once per distinct pair)."""
        if len(context):
            pairs, _, _ = unique_rows(context, device)
            self.context_device.update(map(tuple, pairs.tolist()))

    def _name_ids(self, codes: np.ndarray, names: list[str]) -> np.ndarray:
        """Event name ids: each distinct name interned once (the builder would factorise
        an object array of a million names element by element)."""
        table = np.array([self.b.intern(n) for n in names], np.int32)
        return table[codes] if len(codes) else np.zeros(0, np.int32)

    def _label_ids(self, values: np.ndarray, table: dict[int, str], default: str = "{}") -> np.ndarray:
        uniq, inv = np.unique(values, return_inverse=True)
        return self._name_ids(inv.reshape(-1), [table.get(int(v), default.format(int(v))) for v in uniq.tolist()])

    def _api_name_ids(self, cbids: np.ndarray, driver: bool) -> np.ndarray:
        return self._label_ids(cbids, api_names(driver), ("cu" if driver else "cuda") + " API {}")

    def _devices_of(self, context: np.ndarray) -> np.ndarray:
        """The device of each context (0 where no record said)."""
        uniq, inv = np.unique(context.astype(np.int64), return_inverse=True)
        table = np.array([self.context_device.get(x, 0) for x in uniq.tolist()], np.int64)
        return table[inv.reshape(-1)]

    def _external(self, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in ``corr`` with an external id, the ids, their kinds)."""
        if not len(self.ext_corr) or not len(corr):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        pos = np.minimum(np.searchsorted(self.ext_corr, corr), len(self.ext_corr) - 1)
        hit = np.flatnonzero(self.ext_corr[pos] == corr)
        return hit, self.ext_id[pos[hit]], self.ext_kind[pos[hit]]

    def _add_external(self, rows: np.ndarray, corr: np.ndarray) -> None:
        hit, ids, kinds = self._external(corr)
        if len(hit):
            self.b.add_stat(keys.EXTERNAL_ID, rows[hit], ids)
            self.b.add_stat(EXTERNAL_KIND, rows[hit], _labels(kinds, layout.EXTERNAL_KINDS))

    def _graph_stats(self, rows: np.ndarray, c: dict[str, np.ndarray]) -> None:
        g = np.flatnonzero(c["graph_id"] != 0)
        if len(g):
            self.b.add_stat(GRAPH_ID, rows[g], c["graph_id"][g].astype(np.int64))
            self.b.add_stat(GRAPH_NODE_ID, rows[g], c["graph_node_id"][g].astype(np.int64))

    # ------------------------------------------------------------------ kinds
    def read_devices(self) -> None:
        rows = self._rows(layout.DEVICE)
        if len(rows):
            c = decode.columns(self.rec, rows, layout.DEVICE_FIELDS)
            names = decode.texts(self.rec, rows, 0)
            for i, dev in enumerate(c["id"].tolist()):
                self.devices[int(dev)] = {
                    "name": names[i] or "", "multiprocessors": int(c["num_multiprocessors"][i]),
                    "global_memory_bytes": int(c["global_memory_size"][i]),
                    "memory_bandwidth_kBps": int(c["global_memory_bandwidth"][i]),
                    "core_clock_kHz": int(c["core_clock_rate"][i]),
                    "compute_capability": f"{int(c['compute_capability_major'][i])}."
                                          f"{int(c['compute_capability_minor'][i])}"}
        rows = self._rows(layout.CONTEXT)
        if len(rows):
            c = decode.columns(self.rec, rows, layout.CONTEXT_FIELDS)
            self._note_contexts(c["context_id"], c["device_id"])

    def read_external(self) -> None:
        rows = self._rows(layout.EXTERNAL_CORRELATION)
        self.counts["external_correlations"] = len(rows)
        if not len(rows):
            return
        c = decode.columns(self.rec, rows, layout.EXTERNAL_FIELDS)
        corr = c["correlation_id"].astype(np.int64)
        # one external id per correlation id: the last record wins (innermost push)
        order = np.argsort(corr, kind="stable")
        corr, ids, kinds = corr[order], c["external_id"][order].astype(np.int64), c["external_kind"][order]
        last = np.ones(len(corr), bool)
        last[:-1] = corr[1:] != corr[:-1]
        self.ext_corr, self.ext_id, self.ext_kind = corr[last], ids[last], kinds[last].astype(np.int64)

    def kernels(self) -> None:
        rows = self._rows(layout.CONCURRENT_KERNEL, layout.KERNEL)
        self.counts["kernels"] = len(rows)
        if not len(rows):
            return
        c = decode.columns(self.rec, rows, layout.KERNEL_FIELDS)
        rows, open_ = self._timed("kernels", c, rows)
        self._note_contexts(c["context_id"], c["device_id"])
        codes, texts = decode.text_codes(self.rec, rows, 0)
        names = self._name_ids(codes, [(decode.demangle(t) if self.demangle else t) if t else "" for t in texts])
        start, dur = self._time(c["start"], c["end"])
        tracks = self._stream_tracks(c["device_id"], c["stream_id"], c["context_id"])
        corr = c["correlation_id"].astype(np.int64)
        out = self.b.events(tracks, names, start, dur, keys.CAT_KERNEL, stats={
            keys.CORRELATION_ID: corr, keys.STREAM: c["stream_id"].astype(np.int64),
            keys.DEVICE: c["device_id"].astype(np.int64), CONTEXT: c["context_id"].astype(np.int64),
            keys.GRID: _dims(c["grid_x"], c["grid_y"], c["grid_z"]),
            keys.BLOCK: _dims(c["block_x"], c["block_y"], c["block_z"]),
            REGISTERS: c["registers_per_thread"].astype(np.int64),
            SHARED_MEMORY: c["static_shared_memory"].astype(np.int64) + c["dynamic_shared_memory"].astype(np.int64),
        })
        self._occupancy_stats(out, c)
        self._graph_stats(out, c)
        self._add_external(out, corr)
        self._incomplete(out, open_)
        self._device_rows.append((out, corr))

    def _occupancy_stats(self, rows: np.ndarray, c: dict[str, np.ndarray]) -> None:
        """``blocks per SM`` and ``warps per SM`` (Kineto's names): the grid spread over the
        device's multiprocessors (from its DEVICE record; absent without one), a block's
        threads rounded up to whole warps of 32."""
        sms = np.array([self.devices.get(int(d), {}).get("multiprocessors", 0) for d in range(
            int(c["device_id"].max()) + 1)] if len(c["device_id"]) else [], np.float64)
        if not len(sms) or not sms.any():
            return
        per = sms[c["device_id"].astype(np.int64)]
        known = np.flatnonzero(per > 0)
        blocks = (c["grid_x"].astype(np.float64) * c["grid_y"] * c["grid_z"])[known] / per[known]
        threads = (c["block_x"].astype(np.float64) * c["block_y"] * c["block_z"])[known]
        self.b.add_stat(BLOCKS_PER_SM, rows[known], blocks)
        self.b.add_stat(WARPS_PER_SM, rows[known], blocks * np.ceil(threads / 32.0))

    def copies(self) -> None:
        for kind, fields in ((layout.MEMCPY, layout.MEMCPY_FIELDS), (layout.MEMCPY2, layout.MEMCPY2_FIELDS)):
            rows = self._rows(kind)
            self.counts["memcpy" if kind == layout.MEMCPY else "memcpy_peer"] = len(rows)
            if not len(rows):
                continue
            c = decode.columns(self.rec, rows, fields)
            rows, open_ = self._timed("memcpy", c, rows)
            self._note_contexts(c["context_id"], c["device_id"])
            ck = _labels(c["copy_kind"], layout.MEMCPY_KINDS)
            sk = _labels(c["src_kind"], layout.MEMORY_KINDS)
            dk = _labels(c["dst_kind"], layout.MEMORY_KINDS)
            _, first, inv = unique_rows(c["copy_kind"], c["src_kind"], c["dst_kind"])
            names = self._name_ids(inv, [f"Memcpy {ck[f]} ({sk[f]} -> {dk[f]})" for f in first.tolist()])
            start, dur = self._time(c["start"], c["end"])
            tracks = self._stream_tracks(c["device_id"], c["stream_id"], c["context_id"])
            corr = c["correlation_id"].astype(np.int64)
            stats: dict[str, Any] = {
                keys.CORRELATION_ID: corr, keys.STREAM: c["stream_id"].astype(np.int64),
                keys.DEVICE: c["device_id"].astype(np.int64), CONTEXT: c["context_id"].astype(np.int64),
                keys.BYTES: c["bytes"].astype(np.int64), COPY_KIND: ck, SRC_KIND: sk, DST_KIND: dk}
            if kind == layout.MEMCPY2:
                stats["src device"] = c["src_device_id"].astype(np.int64)
                stats["dst device"] = c["dst_device_id"].astype(np.int64)
            out = self.b.events(tracks, names, start, dur, keys.CAT_MEMCPY, stats=stats)
            self._graph_stats(out, c)
            self._add_external(out, corr)
            self._incomplete(out, open_)
            self._device_rows.append((out, corr))

    def fills(self) -> None:
        rows = self._rows(layout.MEMSET)
        self.counts["memset"] = len(rows)
        if not len(rows):
            return
        c = decode.columns(self.rec, rows, layout.MEMSET_FIELDS)
        rows, open_ = self._timed("memset", c, rows)
        self._note_contexts(c["context_id"], c["device_id"])
        mk = _labels(c["memory_kind"], layout.MEMORY_KINDS)
        names = self._label_ids(c["memory_kind"], {k: f"Memset ({v})" for k, v in layout.MEMORY_KINDS.items()},
                                "Memset ({})")
        start, dur = self._time(c["start"], c["end"])
        tracks = self._stream_tracks(c["device_id"], c["stream_id"], c["context_id"])
        corr = c["correlation_id"].astype(np.int64)
        out = self.b.events(tracks, names, start, dur, keys.CAT_MEMSET, stats={
            keys.CORRELATION_ID: corr, keys.STREAM: c["stream_id"].astype(np.int64),
            keys.DEVICE: c["device_id"].astype(np.int64), CONTEXT: c["context_id"].astype(np.int64),
            keys.BYTES: c["bytes"].astype(np.int64), DST_KIND: mk, "value": c["value"].astype(np.int64)})
        self._graph_stats(out, c)
        self._add_external(out, corr)
        self._incomplete(out, open_)
        self._device_rows.append((out, corr))

    def synchronization(self) -> None:
        rows = self._rows(layout.SYNCHRONIZATION)
        self.counts["synchronization"] = len(rows)
        if not len(rows):
            return
        c = decode.columns(self.rec, rows, layout.SYNC_FIELDS)
        rows, _ = self._timed("synchronization", c, rows)
        ctx = c["context_id"].astype(np.int64)
        device = self._devices_of(ctx)
        start, dur = self._time(c["start"], c["end"])
        tracks = self._stream_tracks(device, c["stream_id"], ctx)
        # NO_STREAM (CUPTI's "not applicable") is stream -1, as Kineto writes it: HTA and
        # --window hta leave such records out of every stream's time
        stream, event = (np.where(c[k] == NO_STREAM, -1, c[k].astype(np.int64)) for k in ("stream_id", "cuda_event_id"))
        self.b.events(tracks, self._label_ids(c["type"], layout.SYNC_TYPES), start, dur, CAT_SYNC, stats={
            keys.CORRELATION_ID: c["correlation_id"].astype(np.int64), keys.DEVICE: device, CONTEXT: ctx,
            keys.STREAM: stream, "cuda_event_id": event})

    def _thread_track(self, tid: int) -> int:
        return self.b.track(self.host, self.threads.get(tid, f"Thread {tid}"), "thread", tid=tid)

    def _thread_tracks(self, tids: np.ndarray) -> np.ndarray:
        uniq, inv = np.unique(tids.astype(np.int64), return_inverse=True)
        table = np.fromiter((self._thread_track(t) for t in uniq.tolist()), np.int32, len(uniq))
        return table[inv.reshape(-1)]

    def api_calls(self) -> None:
        for kind, cat, driver in ((layout.RUNTIME, CAT_RUNTIME, False), (layout.DRIVER, CAT_DRIVER, True)):
            rows = self._rows(kind)
            self.counts["driver_calls" if driver else "runtime_calls"] = len(rows)
            if not len(rows):
                continue
            c = decode.columns(self.rec, rows, layout.API_FIELDS,
                               ["cbid", "start", "end", "thread_id", "correlation_id", "return_value"])
            start, dur = self._time(c.pop("start"), c.pop("end"))
            corr = c["correlation_id"].astype(np.int64)
            out = self.b.events(self._thread_tracks(c["thread_id"]), self._api_name_ids(c["cbid"], driver), start, dur, cat,
                                stats={keys.CORRELATION_ID: corr, "cbid": c["cbid"].astype(np.int64)})
            failed = np.flatnonzero(c["return_value"] != 0)
            if len(failed):
                self.b.add_stat("return_value", out[failed], c["return_value"][failed].astype(np.int64))
            self._add_external(out, corr)
            self._api_rows.append((out, corr))

    def nvtx(self) -> None:
        rows = self._rows(layout.MARKER)
        if not len(rows):
            self.counts["nvtx_ranges"] = self.counts["nvtx_marks"] = 0
            return
        c = decode.columns(self.rec, rows, layout.MARKER_FIELDS)
        names = decode.texts(self.rec, rows, 0)
        domains = decode.texts(self.rec, rows, 1)
        flags = c["flags"].astype(np.int64)
        ts = self.fit.to_host(c["timestamp"].astype(np.int64))
        on_thread = c["object_kind"] == layout.OBJECT_THREAD
        tid = np.where(on_thread, c["thread_id"].astype(np.int64), 0)
        # marks
        m = np.flatnonzero(flags & layout.MARKER_INSTANTANEOUS)
        self.counts["nvtx_marks"] = len(m)
        if len(m):
            self._annotations(m, names, domains, tid, on_thread, ts[m], np.zeros(len(m), np.int64), keys.CAT_MARK)
        # ranges: a START and an END record share an id
        s = np.flatnonzero(flags & layout.MARKER_START)
        e = np.flatnonzero(flags & layout.MARKER_END)
        ids_e = c["id"][e].astype(np.int64)
        order = np.argsort(ids_e, kind="stable")
        ids_sorted, e_sorted = ids_e[order], e[order]
        ids_s = c["id"][s].astype(np.int64)
        pos = np.minimum(np.searchsorted(ids_sorted, ids_s), max(len(ids_sorted) - 1, 0))
        paired = (ids_sorted[pos] == ids_s) if len(ids_sorted) else np.zeros(len(s), bool)
        self.counts["nvtx_ranges"] = int(paired.sum())
        self.counts["nvtx_ranges_open_at_stop"] = int((~paired).sum())
        s, end_rows = s[paired], e_sorted[pos[paired]]
        if len(s):
            self._annotations(s, names, domains, tid, on_thread, ts[s], np.maximum(ts[end_rows] - ts[s], 0),
                              CAT_ANNOTATION)

    def _annotations(self, sel: np.ndarray, names: np.ndarray, domains: np.ndarray, tid: np.ndarray,
                     on_thread: np.ndarray, start: np.ndarray, dur: np.ndarray, cat: str) -> None:
        tracks = self._thread_tracks(tid[sel])
        process_wide = np.flatnonzero(~on_thread[sel])
        if len(process_wide):  # nvtxRangeStart/End: not bound to a thread
            tracks[process_wide] = self.b.track(self.host, "NVTX (process)", "annotation", tid=0)
        nm = names[sel]
        nm = np.where(nm == None, "", nm)  # noqa: E711
        out = self.b.events(tracks, nm, start, dur, cat)
        d = np.flatnonzero(domains[sel] != None)  # noqa: E711
        if len(d):
            self.b.add_stat(NVTX_DOMAIN, out[d], domains[sel][d])

    def unified_memory(self) -> None:
        rows = self._rows(layout.UNIFIED_MEMORY_COUNTER)
        self.counts["unified_memory"] = len(rows)
        if not len(rows):
            return
        c = decode.columns(self.rec, rows, layout.UNIFIED_MEMORY_FIELDS)
        rows, _ = self._timed("unified_memory", c, rows)
        kind = c["counter_kind"].astype(np.int64)
        transfer = np.isin(kind, (1, 2, 8))  # HtoD, DtoH, DtoD: bytes moved
        device = np.where(kind == 2, c["src_id"], c["dst_id"]).astype(np.int64)
        start, dur = self._time(c["start"], c["end"])
        names = self._label_ids(kind, layout.UNIFIED_MEMORY_COUNTERS)
        uniq, inv = np.unique(device, return_inverse=True)
        tracks = np.array([self.b.track(self._plane(d), "Unified Memory", "stream", tid=-2) for d in uniq.tolist()],
                          np.int32)[inv.reshape(-1)]
        for sel, cat in ((np.flatnonzero(transfer), keys.CAT_MEMCPY), (np.flatnonzero(~transfer), CAT_UNIFIED)):
            if len(sel):
                stat = keys.BYTES if cat == keys.CAT_MEMCPY else "count"
                self.b.events(tracks[sel], names[sel], start[sel], dur[sel], cat, stats={
                    stat: c["value"][sel].astype(np.int64), keys.DEVICE: device[sel],
                    keys.ADDR: c["address"][sel].astype(np.int64)})

    def flows(self) -> None:
        """A flow from each API call to the device activity of its correlation id."""
        if not self._api_rows or not self._device_rows:
            self.counts["flows"] = 0
            return
        a_rows = np.concatenate([r for r, _ in self._api_rows])
        a_corr = np.concatenate([c for _, c in self._api_rows])
        d_rows = np.concatenate([r for r, _ in self._device_rows])
        d_corr = np.concatenate([c for _, c in self._device_rows])
        order = np.argsort(a_corr, kind="stable")
        a_corr, a_rows = a_corr[order], a_rows[order]
        pos = np.minimum(np.searchsorted(a_corr, d_corr), len(a_corr) - 1)
        hit = np.flatnonzero((a_corr[pos] == d_corr) & (d_corr != 0))
        self.b.flows(a_rows[pos[hit]], d_rows[hit], d_corr[hit], "ac2g")
        self.counts["flows"] = len(hit)

    def build(self, metadata: dict[str, Any] | None = None) -> Trace:
        """The trace. The records are let go once decoded (the caller holding none), so
        the flows and the builder's final columns do not add to them."""
        self.read_devices()
        self.read_external()
        self.kernels()
        self.copies()
        self.fills()
        self.synchronization()
        self.api_calls()
        self.nvtx()
        self.unified_memory()
        self.rec = Records.of([])
        self.flows()
        self.b.metadata.update(metadata or {})
        return self.b.build()
