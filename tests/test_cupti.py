"""The cupti plugin without a GPU.

No NVIDIA GPU or driver is on the machines these tests run on, so CUPTI itself cannot
run. What runs for real: cupti-python (its record types: every record below is laid
out by the binding's own NumPy dtypes for CUPTI's structs, ``activity_kernel13_dtype``
..., and handed to the Python sink as the binding's own record objects), the C buffer
sink (``_cuptibuf.c``, driven through its two CUPTI callbacks by address), the decoder,
the converter, the clock service, torch.profiler (for the subscriber conflict) and the
conformance kit. What is faked is the device layer only (``FakeCupti``, in place of
``device.CuptiDevice``): a CUDA machine's CUPTI that fills buffers with those records,
walks them as ``cuptiActivityGetNextRecord`` does (record sizes from the binding's
dtypes, 8-byte alignment, CUPTI_ERROR_MAX_LIMIT_REACHED at the end) and reads a clock
running at an offset and a drift from the host's.
"""

from __future__ import annotations

from collections import Counter

import ctypes
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

cupti_binding = pytest.importorskip("cupti.cupti", reason="cupti-python is not installed")

from polyprof.collect.clock import now_ns  # noqa: E402
from polyprof.collect.plugin import SessionContext  # noqa: E402
from polyprof.plugins.cupti import buffers, clock, convert, decode, holder, layout  # noqa: E402
from polyprof.plugins.cupti.plugin import CuptiPlugin  # noqa: E402
from polyprof.trace import keys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

needs_c = pytest.mark.skipif(buffers._cuptibuf is None, reason="_cuptibuf not built (setup.py build_ext)")

# ----------------------------------------------------------------------------- records


def newest(name: str, pattern: str) -> str:
    """``name`` when the binding has it (cupti-python 13.4), else the newest version of the
    same struct it has: cupti-python 13.0.x names CUPTI 13.0's structs
    (``activity_kernel10_dtype``, ``ActivityMemcpy6``, ``activity_marker_data_dtype``...)."""
    if hasattr(cupti_binding, name):
        return name
    stem = re.fullmatch(pattern, name)
    assert stem is not None, name
    pat = re.compile(re.escape(stem.group(1)) + r"(\d*)" + re.escape(stem.group(2)))
    found = [(int(m.group(1) or 0), n) for n in dir(cupti_binding) if (m := pat.fullmatch(n))]
    assert found, f"cupti-python has no struct like {name}"
    return max(found)[1]


def dtype_of(kind: int) -> np.dtype:
    return getattr(cupti_binding, newest(layout.DTYPE_NAMES[kind], r"(.*?)\d*(_dtype)"))


def record_class(kind: int) -> type:
    """The binding's record type of ``kind`` (``ActivityKernel13``, 13.0: ``ActivityKernel10``)."""
    return getattr(cupti_binding, newest("Activity" + layout.STRUCTS[kind], r"(.*?)\d*()"))


def record(kind: int, **fields) -> np.ndarray:
    """One record of ``kind`` laid out by the binding's dtype for CUPTI's struct."""
    r = np.zeros(1, dtype_of(kind))
    r["kind"] = kind
    for k, v in fields.items():
        if k in ("process_id", "thread_id") and "object_id" in r.dtype.names:
            r["object_id"]["pt"][k] = v
        else:
            r[k if k in r.dtype.names else k + "_"] = v  # the binding's "flags_"
    return r


class FakeCupti:
    """The device layer of a CUDA machine (see the module docstring)."""

    def __init__(self, offset_ns: int = 1_700_000_000_000_000_000, drift_ppm: float = 40.0,
                 taken: str | None = None, t0: int | None = None) -> None:
        self.offset_ns, self.drift_ppm, self.taken = offset_ns, drift_ppm, taken
        self.t0 = now_ns() if t0 is None else t0
        self.pending: list[np.ndarray] = []
        self.strings: list[ctypes.Array] = []  # CUPTI's strings, alive until their buffer completes
        self.enabled: set[int] = set()
        self.subscribed = False
        self.flushes = 0
        self.sink_obj: buffers.CSink | buffers.PySink | None = None
        self._next = self._walker()
        self.dropped = 0  # records CUPTI says it dropped per completed buffer

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t))
        def dropped(ctx, stream, out):  # cuptiActivityGetNumDroppedRecords
            out[0] = self.dropped
            return 0

        self._dropped = dropped

    # the clock
    def to_cupti(self, host_ns) -> np.ndarray:
        h = np.asarray(host_ns, np.int64)
        return h + self.offset_ns + np.rint((h - self.t0) * self.drift_ppm * 1e-6).astype(np.int64)

    def timestamp(self) -> int:
        return int(self.to_cupti(now_ns()))

    # the device layer's interface
    def subscribe(self) -> str | None:
        if self.taken:
            return self.taken
        self.subscribed = True
        return None

    def unsubscribe(self) -> None:
        self.subscribed = False

    def system_thread_ids(self) -> None:
        pass

    def enable(self, kind: int) -> None:
        self.enabled.add(kind)

    def disable(self, kind: int) -> None:
        self.enabled.discard(kind)

    def library_path(self) -> str:
        return "/fake/libcupti.so.13"

    def sink(self, implementation: str = buffers.IMPLEMENTATION, buffer_bytes: int = 8 << 20, not_kept=()):
        if implementation == "c":
            drop = ctypes.cast(self._dropped, ctypes.c_void_p).value if self.dropped else 0
            self.sink_obj = buffers.CSink(ctypes.cast(self._next, ctypes.c_void_p).value, drop, buffer_bytes,
                                          not_kept)
        else:
            self.sink_obj = buffers.PySink(buffer_bytes, not_kept)
        self.buffer_bytes = buffer_bytes
        return self.sink_obj

    def flush(self) -> None:
        self.flushes += 1
        deliver(self.sink_obj, self.pending, self.buffer_bytes, self._next)
        self.pending = []
        self.strings = []

    # what a GPU run produces
    def text(self, s: str | None) -> int:
        if s is None:
            return 0
        buf = ctypes.create_string_buffer(s.encode())
        self.strings.append(buf)
        return ctypes.addressof(buf)

    def emit(self, kind: int, **fields) -> None:
        if kind in self.enabled:
            self.pending.append(record(kind, **fields))

    def kernel(self, name, t0, t1, corr, stream=7, device=0, ctx=1, grid=(4, 1, 1), block=(128, 1, 1), regs=32,
               smem=(1024, 256), graph=(0, 0)):
        self.emit(layout.CONCURRENT_KERNEL, start=self.to_cupti(t0), end=self.to_cupti(t1), correlation_id=corr,
                  stream_id=stream, device_id=device, context_id=ctx, grid_x=grid[0], grid_y=grid[1],
                  grid_z=grid[2], block_x=block[0], block_y=block[1], block_z=block[2],
                  registers_per_thread=regs, static_shared_memory=smem[0], dynamic_shared_memory=smem[1],
                  graph_id=graph[0], graph_node_id=graph[1], name=self.text(name))

    def api(self, cbid, t0, t1, corr, tid, driver=False):
        self.emit(layout.DRIVER if driver else layout.RUNTIME, cbid=cbid, start=self.to_cupti(t0),
                  end=self.to_cupti(t1), correlation_id=corr, thread_id=tid, process_id=os.getpid())

    def memcpy(self, t0, t1, corr, nbytes, copy_kind=1, src=1, dst=3, stream=7):
        self.emit(layout.MEMCPY, start=self.to_cupti(t0), end=self.to_cupti(t1), correlation_id=corr,
                  bytes=nbytes, copy_kind=copy_kind, src_kind=src, dst_kind=dst, stream_id=stream,
                  device_id=0, context_id=1)

    def memset(self, t0, t1, corr, nbytes, stream=7):
        self.emit(layout.MEMSET, start=self.to_cupti(t0), end=self.to_cupti(t1), correlation_id=corr,
                  bytes=nbytes, memory_kind=3, stream_id=stream, device_id=0, context_id=1, value=0)

    def sync(self, t0, t1, corr, kind=3, stream=7):
        self.emit(layout.SYNCHRONIZATION, start=self.to_cupti(t0), end=self.to_cupti(t1), correlation_id=corr,
                  type=kind, stream_id=stream, context_id=1)

    def external(self, corr, ext_id, ext_kind=3):
        self.emit(layout.EXTERNAL_CORRELATION, correlation_id=corr, external_id=ext_id, external_kind=ext_kind)

    def nvtx(self, name, t0, t1, tid, rid, domain=None):
        self.emit(layout.MARKER, flags=layout.MARKER_START, timestamp=self.to_cupti(t0), id=rid,
                  object_kind=layout.OBJECT_THREAD, thread_id=tid, process_id=os.getpid(), name=self.text(name),
                  domain=self.text(domain))
        self.emit(layout.MARKER, flags=layout.MARKER_END, timestamp=self.to_cupti(t1), id=rid,
                  object_kind=layout.OBJECT_THREAD, thread_id=tid, process_id=os.getpid())

    def mark(self, name, t, tid, rid):
        self.emit(layout.MARKER, flags=layout.MARKER_INSTANTANEOUS, timestamp=self.to_cupti(t), id=rid,
                  object_kind=layout.OBJECT_THREAD, thread_id=tid, process_id=os.getpid(), name=self.text(name))

    def device_record(self, dev=0, name="NVIDIA H100 80GB HBM3"):
        self.emit(layout.DEVICE, id=dev, name=self.text(name), num_multiprocessors=132,
                  global_memory_size=80 << 30, compute_capability_major=9, compute_capability_minor=0)

    # cuptiActivityGetNextRecord, as CUPTI documents it
    @staticmethod
    def _walker():
        sizes = {k: dtype_of(k).itemsize for k in layout.DTYPE_NAMES}

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
        def next_record(buf, valid, rec):
            if not rec[0]:
                off = 0
            else:
                cur = rec[0] - buf
                kind = ctypes.c_int32.from_address(rec[0]).value
                off = cur + sizes[kind] + (-sizes[kind]) % layout.ALIGNMENT
            if off >= valid:
                return layout.ERROR_MAX_LIMIT_REACHED
            rec[0] = buf + off
            return 0

        return next_record


REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t))
COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)


def deliver(sink, recs: list[np.ndarray], buffer_bytes: int, walker=None) -> None:
    """Fill CUPTI buffers with ``recs`` (each padded to 8 bytes) and complete them, as
    CUPTI does: through the C sink's two callbacks, or as the binding hands them to
    Python (a list of its record objects per buffer)."""
    chunks: list[list[np.ndarray]] = [[]]
    used = 0
    for r in recs:
        size = r.dtype.itemsize + (-r.dtype.itemsize) % layout.ALIGNMENT
        if used + size > buffer_bytes:
            chunks.append([])
            used = 0
        chunks[-1].append(r)
        used += size
    for chunk in chunks:
        if not chunk:
            continue
        if isinstance(sink, buffers.CSink):
            req_addr, done_addr = sink.addresses()
            ptr, size, maxn = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
            REQUEST(req_addr)(ctypes.byref(ptr), ctypes.byref(size), ctypes.byref(maxn))
            off = 0
            for r in chunk:
                ctypes.memmove(ptr.value + off, r.ctypes.data, r.dtype.itemsize)
                off += r.dtype.itemsize + (-r.dtype.itemsize) % layout.ALIGNMENT
            COMPLETE(done_addr)(None, 0, ptr.value, size.value, off)
        else:  # CUPTI's buffer, and the binding's record objects over it (as its callback makes them)
            objs, buf = binding_records(chunk, buffer_bytes)
            sink.complete(objs)


def binding_records(chunk: list[np.ndarray], buffer_bytes: int) -> tuple[list, np.ndarray]:
    """``chunk`` laid out one after the other in one buffer of ``buffer_bytes`` (returned:
    keep it alive), and the binding's own record objects wrapping each record in place
    (their ``.ptr``): 13.4's ``from_ptr(ptr, owner=)``, 13.0's ``from_ptr(ptr)``."""
    buf = np.zeros(buffer_bytes, np.uint8)
    objs, off = [], 0
    for r in chunk:
        buf[off:off + r.dtype.itemsize] = r.view(np.uint8)
        cls = record_class(int(r["kind"][0]))
        try:
            objs.append(cls.from_ptr(buf.ctypes.data + off, owner=buf))
        except TypeError:  # cupti-python 13.0: no owner, always in place
            objs.append(cls.from_ptr(buf.ctypes.data + off))
        off += r.dtype.itemsize + (-r.dtype.itemsize) % layout.ALIGNMENT
    return objs, buf


# ----------------------------------------------------------------------------- layout


def test_layout_offsets_are_the_bindings():
    """Every field the decoder reads sits where cupti-python's dtype of CUPTI's struct
    says, with the same type; the record sizes are the dtypes' itemsizes."""
    for kind, fields in layout.FIELDS.items():
        dt = dtype_of(kind)
        if hasattr(cupti_binding, layout.DTYPE_NAMES[kind]):  # 13.4's structs (13.0's are smaller)
            assert layout.RECORD_SIZE[kind] == dt.itemsize, layout.KIND_NAMES[kind]
        for name, f in fields.items():
            if name in ("process_id", "thread_id") and kind == layout.MARKER:
                sub, base = dt.fields["object_id"]
                t, o = sub.fields["pt"][0].fields[name]
                assert (base + o, t.str) == (f.offset, f.dtype)
                continue
            t, o = dt.fields[name if name in dt.fields else name + "_"][:2]  # the binding's "flags_"
            if name in ("name", "domain"):  # const char *: the binding says int64, the decoder reads uint64
                t = np.dtype("<u8") if t == np.dtype("<i8") else t
            assert (o, t) == (f.offset, np.dtype(f.dtype)), (layout.KIND_NAMES[kind], name, o, t.str, f)
    for kind, offs in layout.STRING_FIELDS.items():
        assert offs == tuple(layout.FIELDS[kind][n].offset for n in ("name", "domain")[:len(offs)])


# ----------------------------------------------------------------------------- buffers


def workload_records(fake: FakeCupti, n: int = 300, tid: int = 4242, t: int | None = None) -> tuple[int, int]:
    """A run: n launches (runtime call -> kernel), copies, a fill, a sync, NVTX; returns (t0, t1)."""
    for k in layout.FIELDS:
        fake.enable(k)
    t = now_ns() if t is None else t
    fake.device_record()
    corr = 1
    fake.nvtx("forward", t, t + n * 2_000 + 50_000, tid, rid=1, domain="polyprof-test")
    for i in range(n):
        a = t + 1_000 + i * 2_000
        fake.api(211, a, a + 800, corr, tid)
        fake.external(corr, 9000 + i // 10)
        fake.kernel("_Z6kernelPfi" if i % 3 else "gemm_tile", a + 20_000, a + 21_000, corr,
                    graph=(5, 100 + i) if i % 7 == 0 else (0, 0))
        corr += 1
    a = t + n * 2_000 + 10_000
    fake.api(31, a, a + 3_000, corr, tid)
    fake.memcpy(a + 500, a + 2_500, corr, 1 << 20)
    corr += 1
    fake.api(49, a + 4_000, a + 4_500, corr, tid)
    fake.memset(a + 5_000, a + 5_400, corr, 4096)
    corr += 1
    fake.api(131, a + 6_000, a + 9_000, corr, tid)
    fake.sync(a + 6_100, a + 8_900, corr)
    fake.mark("checkpoint", a + 9_500, tid, rid=99)
    return t, a + 10_000


def decoded(sink, fake: FakeCupti) -> buffers.Records:
    fake.flush()
    return buffers.Records.of(sink.take())


@needs_c
def test_c_sink_and_python_sink_decode_alike():
    """The same records through the C callbacks and through the binding's objects give the
    same columns and texts, across several buffers."""
    out = {}
    for impl in ("c", "python"):
        fake = FakeCupti(t0=10**12)
        sink = fake.sink(impl, buffer_bytes=16384)  # small buffers: several completions
        workload_records(fake, t=10**12)
        rec = decoded(sink, fake)
        assert sink.counts()["buffers_completed"] > 3
        out[impl] = rec
    c, p = out["c"], out["python"]
    assert np.array_equal(c.kinds, p.kinds) and len(c.kinds) == 1 + 2 + 3 * 300 + 3 * 2 + 1
    for kind, fields in layout.FIELDS.items():
        rc, rp = decode.rows_of(c, [kind]), decode.rows_of(p, [kind])
        assert len(rc) == len(rp)
        for name, f in fields.items():
            if name in ("name", "domain"):  # CUPTI's pointers: compared as texts below
                continue
            assert np.array_equal(decode.column(c, rc, f), decode.column(p, rp, f)), (kind, name)
        for slot in range(len(layout.STRING_FIELDS.get(kind, ()))):
            assert list(decode.texts(c, rc, slot)) == list(decode.texts(p, rp, slot))
    k = decode.rows_of(c, [layout.CONCURRENT_KERNEL])
    assert set(decode.texts(c, k, 0)) == {"_Z6kernelPfi", "gemm_tile"}


@needs_c
def test_c_sink_copies_strings_while_cupti_holds_them():
    """Texts are copied at completion: CUPTI may free its strings after the callback."""
    fake = FakeCupti()
    sink = fake.sink("c")
    fake.enable(layout.CONCURRENT_KERNEL)
    fake.enable(layout.MARKER)
    t = now_ns()
    fake.kernel("first_kernel", t, t + 10, 1)
    fake.nvtx("range", t, t + 20, 11, rid=3, domain="d")
    fake.flush()  # drops the fake's strings (ctypes buffers) after completion
    junk = [ctypes.create_string_buffer(b"x" * 64) for _ in range(1000)]  # reuse the freed memory
    rec = buffers.Records.of(sink.take())
    del junk
    assert list(decode.texts(rec, decode.rows_of(rec, [layout.CONCURRENT_KERNEL]), 0)) == ["first_kernel"]
    m = decode.rows_of(rec, [layout.MARKER])
    assert list(decode.texts(rec, m, 0)) == ["range", None] and list(decode.texts(rec, m, 1)) == ["d", None]


def test_records_of_concatenates_batches_and_lets_each_go():
    """Batches of odd sizes, with and without strings, end up where a plain concatenation
    (each batch padded to 8 bytes, string offsets moved by the arenas before) puts them;
    the list is emptied as it is copied, so a session holds one copy of its records."""
    rng = np.random.default_rng(3)
    batches, want_blob, want_strs, arena = [], b"", [], b""
    row_offsets = []
    for size, n in ((40, 1), (253, 3), (8, 1), (1000, 7)):
        recs = rng.integers(0, 255, size, np.uint8).tobytes()
        offs = np.sort(rng.choice(size // 8, n, replace=False)) * 8
        strs = np.where(rng.random((n, 2)) < 0.5, rng.integers(0, 5, (n, 2)), -1)
        text = bytes(rng.integers(97, 122, 5, np.uint8))
        batches.append(buffers.Batch(recs, offs.astype(np.int64).tobytes(), np.full(n, 10 + n, np.int32).tobytes(),
                                     strs.astype(np.int64).tobytes(), text))
        row_offsets += (offs + len(want_blob)).tolist()
        want_strs += np.where(strs >= 0, strs + len(arena), -1).tolist()
        want_blob += recs + bytes(-len(recs) % 8)
        arena += text
    given = list(batches)
    rec = buffers.Records.of(given)
    assert given == []
    assert rec.blob.tobytes() == want_blob and rec.arena == arena
    assert rec.offsets.tolist() == row_offsets and rec.strings.tolist() == want_strs
    assert rec.kinds.tolist() == [11, 13, 13, 13, 11] + [17] * 7
    empty = buffers.Records.of([])
    assert len(empty.kinds) == 0 and empty.strings.shape == (0, 2) and empty.blob.dtype == np.uint8


def _query_run(fake: FakeCupti, n: int = 200) -> tuple[int, int]:
    """``n`` launches, each with the calls torch makes around it: two cudaGetDevice and a
    cudaGetLastError (runtime queries), cuCtxGetCurrent (a driver query), the
    cudaLaunchKernel and its kernel. (query calls, their total ns)."""
    fake.enable(layout.CONCURRENT_KERNEL)
    fake.enable(layout.RUNTIME)
    fake.enable(layout.DRIVER)
    rt, dr = ({v: k for k, v in convert.api_names(d).items()} for d in (False, True))
    t = now_ns()
    q = q_ns = 0
    for i in range(n):
        a = t + i * 10_000
        for j, (cbid, driver) in enumerate(((rt["cudaGetDevice"], False), (dr["cuCtxGetCurrent"], True),
                                            (rt["cudaGetDevice"], False))):
            fake.api(cbid, a + j * 100, a + j * 100 + 40 + j, 3 * i + j + 10**6, 7, driver=driver)
            q, q_ns = q + 1, q_ns + 40 + j
        fake.api(rt["cudaLaunchKernel"], a + 400, a + 900, i + 1, 7)
        fake.kernel("k", a + 2_000, a + 3_000, i + 1)
        fake.api(rt["cudaGetLastError"], a + 950, a + 960, 3 * n + i + 10**6, 7)
        q, q_ns = q + 1, q_ns + 10
    fake.flush()
    return q, q_ns


@pytest.mark.parametrize("impl", [pytest.param("c", marks=needs_c), "python"])
def test_query_calls_are_counted_not_kept(impl):
    """The calls that only read state are left out by the sink (the C sink also moves
    their bytes out of its buffers), counted with their time; the launches, their kernels
    and everything decoded from them are as when every call is kept."""
    from polyprof.plugins.cupti.plugin import QUERY_CALLS, calls_not_kept, query_call_ids

    recs = {}
    for skip in (False, True):
        fake = FakeCupti(drift_ppm=0.0)
        sink = fake.sink(impl, buffer_bytes=16384, not_kept=query_call_ids() if skip else ())
        q, q_ns = _query_run(fake)
        batches = sink.take()
        recs[skip] = (buffers.Records.of(batches), sink.calls_not_kept(), sink.counts())
    everything, _, _ = recs[False]
    kept, left, counts = recs[True]
    assert counts["calls_not_kept"] == q == 800 and counts["records"] == len(kept.kinds) == 400
    assert calls_not_kept(left) == {"cudaGetDevice": {"calls": 400, "total_ns": 200 * (40 + 42)},
                                    "cuCtxGetCurrent": {"calls": 200, "total_ns": 200 * 41},
                                    "cudaGetLastError": {"calls": 200, "total_ns": 200 * 10}}
    assert sum(v["total_ns"] for v in calls_not_kept(left).values()) == q_ns
    for kind, fields in ((layout.CONCURRENT_KERNEL, layout.KERNEL_FIELDS), (layout.RUNTIME, layout.API_FIELDS)):
        a, b = decode.rows_of(everything, [kind]), decode.rows_of(kept, [kind])
        full = decode.columns(everything, a, fields, ["start", "end", "correlation_id"])
        names = {int(c): convert.api_names(False).get(int(c)) for c in decode.column(everything, a, fields["cbid"])} \
            if kind == layout.RUNTIME else {}
        want = np.array([names.get(int(c)) not in QUERY_CALLS for c in decode.column(everything, a, fields["cbid"])]) \
            if names else np.ones(len(a), bool)
        got = decode.columns(kept, b, fields, ["start", "end", "correlation_id"])
        assert np.array_equal(got["correlation_id"], full["correlation_id"][want]), kind
        assert np.array_equal(got["end"] - got["start"], (full["end"] - full["start"])[want]), kind  # t0 differs
    assert list(decode.texts(kept, decode.rows_of(kept, [layout.CONCURRENT_KERNEL]), 0)) == ["k"] * 200
    if impl == "c":  # the buffers shrink to what they keep
        assert len(kept.blob) == len(everything.blob) - 800 * 40


@pytest.mark.parametrize("seed", range(6))
def test_both_sinks_leave_out_the_same_calls_from_random_buffers(seed):
    """Random runs of kernels (248-byte records with names), copies, fills, runtime and
    driver calls (40 bytes; query calls among them), in buffers of random sizes: both
    sinks keep exactly the records that are not query calls, in order, with their
    names, and count the others."""
    from polyprof.plugins.cupti.plugin import query_call_ids

    rng = np.random.default_rng(seed)
    skip = query_call_ids()
    quiet = {c for k, c in skip if k == layout.RUNTIME}, {c for k, c in skip if k == layout.DRIVER}
    rt, dr = sorted(convert.api_names(False)), sorted(convert.api_names(True))
    n = int(rng.integers(1, 400))
    what = rng.integers(0, 5, n)
    cbids = [int(rng.choice(list(quiet[0]) if rng.random() < 0.6 else rt)) for _ in range(n)]
    dcbids = [int(rng.choice(list(quiet[1]) if rng.random() < 0.6 else dr)) for _ in range(n)]
    size = int(rng.integers(1, 6)) * 4096  # buffers of 1 to 5 pages: records cut across several
    out = {}
    for impl in [*(["c"] if buffers.IMPLEMENTATION == "c" else []), "python"]:
        fake = FakeCupti(drift_ppm=0.0)
        for k in (layout.CONCURRENT_KERNEL, layout.RUNTIME, layout.DRIVER, layout.MEMCPY, layout.MEMSET):
            fake.enable(k)
        sink = fake.sink(impl, buffer_bytes=size, not_kept=skip)
        t = now_ns()
        want_corr = []
        for i, w in enumerate(what.tolist()):
            a = t + i * 1_000
            if w == 0:
                fake.kernel(f"k{i % 7}", a, a + 500, i + 1)
            elif w == 1:
                fake.api(cbids[i], a, a + 100, i + 1, 9)
            elif w == 2:
                fake.api(dcbids[i], a, a + 100, i + 1, 9, driver=True)
            elif w == 3:
                fake.memcpy(a, a + 200, i + 1, 64)
            else:
                fake.memset(a, a + 200, i + 1, 64)
            left = (w == 1 and cbids[i] in quiet[0]) or (w == 2 and dcbids[i] in quiet[1])
            if not left:
                want_corr.append(i + 1)
        fake.flush()
        rec = buffers.Records.of(sink.take())
        corr = np.zeros(len(rec.kinds), np.int64)
        for kind, fields in layout.FIELDS.items():
            if "correlation_id" in fields:
                rows = decode.rows_of(rec, [kind])
                corr[rows] = decode.column(rec, rows, fields["correlation_id"])
        assert corr.tolist() == want_corr, impl
        k = decode.rows_of(rec, [layout.CONCURRENT_KERNEL])
        assert list(decode.texts(rec, k, 0)) == [f"k{(c - 1) % 7}" for c in corr[k].tolist()]
        assert sink.counts()["calls_not_kept"] == n - len(want_corr)
        out[impl] = sink.calls_not_kept()
    if "c" in out:
        assert out["c"] == out["python"]


def test_session_keeps_query_calls_only_when_asked():
    """In a session the plugin leaves the query calls out by default and says so in its
    metadata; ``query_calls: true`` keeps them as events."""
    os.environ.pop("NVTX_INJECTION64_PATH", None)
    for keep in (False, True):
        fake = FakeCupti(drift_ppm=0.0)  # the calls' durations as written (a drift rounds them)
        p, _ = started(fake, **({"query_calls": True} if keep else {}))
        _query_run(fake, n=50)
        p.stop()
        tr = p.collect()
        names = Counter(tr.strings[i] for i in tr.events["name"])
        md = tr.metadata["cupti"]
        assert names["cudaLaunchKernel"] == 50 and names["k"] == 50 and md["flows"] == 50
        if keep:
            assert names["cudaGetDevice"] == 100 and md["calls_not_kept"] == {}
        else:
            assert names["cudaGetDevice"] == names["cuCtxGetCurrent"] == names["cudaGetLastError"] == 0
            assert md["calls_not_kept"]["cudaGetDevice"] == {"calls": 100, "total_ns": 50 * 82}
            assert md["buffers"]["calls_not_kept"] == 200
            # and the summary's header says so, in text and JSON
            import io

            from rich.console import Console

            from polyprof.report.tables import build
            from polyprof.report.terminal import render

            report = build(tr)
            assert report.overview["calls_not_kept"] == {"cudaGetDevice": 100, "cuCtxGetCurrent": 50,
                                                         "cudaGetLastError": 50}
            text = io.StringIO()
            render(report, console=Console(file=text, width=200))
            assert ("query calls: 200 counted, not kept as events (cudaGetDevice 100, cuCtxGetCurrent 50, "
                    "cudaGetLastError 50)") in " ".join(text.getvalue().split())


def test_decoder_reads_unaligned_layouts_by_bytes():
    """A field at an offset that is not a multiple of its size is gathered byte by byte."""
    r = record(layout.EXTERNAL_CORRELATION, external_id=2**40 + 5, correlation_id=77)
    blob = np.zeros(64, np.uint8)
    blob[4:4 + 24] = np.frombuffer(r.tobytes(), np.uint8)
    rec = buffers.Records(blob, np.array([4], np.int64), np.array([39], np.int32), np.full((1, 2), -1), b"")
    assert decode.column(rec, np.array([0]), layout.EXTERNAL_FIELDS["external_id"])[0] == 2**40 + 5
    assert decode.column(rec, np.array([0]), layout.EXTERNAL_FIELDS["correlation_id"])[0] == 77


def test_demangle():
    assert decode.demangle("_Z6kernelPfi") == "kernel(float*, int)"
    assert decode.demangle("gemm_tile") == "gemm_tile"
    assert decode.demangle("_Zgarbage") == "_Zgarbage"


# ----------------------------------------------------------------------------- the plugin


def started(fake: FakeCupti, **options) -> tuple[CuptiPlugin, SessionContext]:
    p = CuptiPlugin(device=fake, clock_interval_s=0.01, **options)
    ctx = SessionContext(start_ns=now_ns(), wall_anchor={})
    p.start(ctx)
    return p, ctx


@pytest.mark.parametrize("impl", [pytest.param("c", marks=needs_c), "python"])
def test_session_converts_a_run_onto_the_session_clock(impl):
    """start -> a run's records -> stop (flush) -> collect: kernels on their stream with
    launch configuration, graph ids and external ids, copies, fills, sync, runtime calls
    linked by flows, NVTX ranges as sections projected onto their kernels, all on the
    session clock within the fit's bound."""
    os.environ.pop("NVTX_INJECTION64_PATH", None)
    fake = FakeCupti(drift_ppm=40.0)
    p, ctx = started(fake, implementation=impl)
    assert holder.holds_cupti() and fake.subscribed and layout.CONCURRENT_KERNEL in fake.enabled
    assert os.environ["NVTX_INJECTION64_PATH"] == fake.library_path()  # NVTX reports to CUPTI
    tid = 4242
    t, t_end = workload_records(fake, n=300, tid=tid)
    time.sleep(0.05)  # periodic clock samples
    p.stop()
    assert fake.flushes >= 1 and not fake.subscribed and not holder.holds_cupti()
    assert "NVTX_INJECTION64_PATH" not in os.environ  # processes started later do not load CUPTI
    tr = p.collect()
    md = tr.metadata["cupti"]
    assert md["implementation"] == impl and md["kernels"] == 300 and md["flows"] == 302, md
    assert md["nvtx_ranges"] == 1 and md["nvtx_marks"] == 1
    fit = tr.metadata["clock_sync"]["/device:GPU:0"]["cupti"]
    assert fit["consistent"] and fit["bound_ns"] < 200_000 and fit["samples"] >= 16, fit
    ev, s = tr.events, tr.strings
    cat = np.array(s, object)[ev["category"]]
    names = np.array(s, object)[ev["name"]]
    k = np.flatnonzero(cat == keys.CAT_KERNEL)
    assert set(names[k]) == {"kernel(float*, int)", "gemm_tile"}
    # device times mapped back onto the host clock the fake ran them at, within the bound
    first = k[np.argmin(ev["start_ns"][k])]
    assert abs(int(ev["start_ns"][first]) - (t + 1_000 + 20_000)) <= fit["bound_ns"] + 1
    assert (ev["dur_ns"][k] >= 999).all() and (ev["dur_ns"][k] <= 1_001).all()
    plane = tr.planes[tr.track_plane[ev["track"][first]]]
    assert plane.name == "/device:GPU:0" and plane.properties["name"] == "NVIDIA H100 80GB HBM3"
    assert tr.tracks[ev["track"][first]].name == "Stream 7"
    for key, val in ((keys.GRID, "4,1,1"), (keys.BLOCK, "128,1,1"), (convert.REGISTERS, 32),
                     (convert.SHARED_MEMORY, 1280), (keys.EXTERNAL_ID, 9000), (keys.STREAM, 7)):
        m, v = tr.stats[key].lookup(np.array([first]))
        assert m[0] and v[0] == val, key
    m, v = tr.stats[convert.BLOCKS_PER_SM].lookup(np.array([first]))  # 4 blocks over 132 SMs, 4 warps each
    assert m[0] and abs(v[0] - 4 / 132) < 1e-12 and tr.stats[convert.WARPS_PER_SM].lookup(
        np.array([first]))[1][0] == 4 * 4 / 132
    m, v = tr.stats[convert.GRAPH_NODE_ID].lookup(k)
    assert m.sum() == 43 and set(v.tolist()) == {100 + i for i in range(0, 300, 7)}
    cp = np.flatnonzero(cat == keys.CAT_MEMCPY)
    assert list(names[cp]) == ["Memcpy HtoD (Pageable -> Device)"]
    assert tr.stats[keys.BYTES].lookup(cp)[1][0] == 1 << 20
    assert list(names[cat == keys.CAT_MEMSET]) == ["Memset (Device)"]
    assert list(names[cat == convert.CAT_SYNC]) == ["Stream Sync"]
    rt = np.flatnonzero(cat == convert.CAT_RUNTIME)
    assert set(names[rt]) == {"cudaLaunchKernel", "cudaMemcpy", "cudaMemset", "cudaStreamSynchronize"}
    assert {tr.tracks[i].tid for i in ev["track"][rt]} == {tid}
    # NVTX: a section on the launching thread, projected onto the 300 kernels it launched
    from polyprof.analyze.sections import section_stats
    from polyprof.analyze.frames import column

    st = section_stats(tr)
    row = list(column(st, "name")).index("forward")
    assert column(st, "device_ops")[row] == 300 + 2  # 300 kernels, the copy, the fill
    assert tr.stats[convert.NVTX_DOMAIN].lookup(np.flatnonzero(names == "forward"))[1][0] == "polyprof-test"


def test_clock_bound_covers_the_true_mapping():
    """Paired samples of a clock 1.7e18 ns ahead and 40 ppm fast: the fit maps every
    CUPTI time to its host time within the stated bound, over a run and past it."""
    fake = FakeCupti(drift_ppm=40.0)
    s = clock.ClockSampler(fake.timestamp, interval_s=0.005)
    s.start()
    deadline = time.monotonic() + 5.0  # at least 0.1 s, and until the sampler took 4 samples (a loaded machine)
    time.sleep(0.1)
    while len(s.samples) < 8 + 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.stop()
    fit, meta = s.fit()
    assert fit.consistent and meta["samples"] >= 20  # two bursts of 8 and at least 4 in between
    host = np.linspace(fake.t0, now_ns(), 50).astype(np.int64)
    err = np.abs(fit.to_host(fake.to_cupti(host)) - host)
    assert (err <= fit.bound_at(fake.to_cupti(host)) + 1).all(), (err.max(), fit.bound_ns)
    assert fit.bound_ns < 100_000 and abs(fit.drift_ppm + 40.0) < 20.0, fit  # host = other - 40 ppm


def test_another_subscriber_defers_with_one_line(caplog):
    """When another tool holds CUPTI's subscriber slot the plugin defers: one warning,
    nothing enabled, an empty trace that says why."""
    from polyprof.plugins.cupti.device import CuptiDevice

    class Taken:  # cupti-python as it answers when Nsight or Kineto subscribed first
        cuptiError = cupti_binding.cuptiError

        @staticmethod
        def subscribe(cb, data):
            raise cupti_binding.cuptiError(layout.ERROR_MULTIPLE_SUBSCRIBERS)

    dev = CuptiDevice.__new__(CuptiDevice)
    dev.binding, dev._subscriber, dev._lib = Taken, None, None
    why = dev.subscribe()
    assert why and "another tool already holds CUPTI" in why
    fake = FakeCupti(taken=why)
    p, ctx = started(fake)
    assert not fake.enabled and not holder.holds_cupti()
    assert len(ctx.warnings) == 1 and "another tool already holds CUPTI" in ctx.warnings[0]
    p.stop()
    tr = p.collect()
    assert tr.n_events == 0 and "another tool" in tr.metadata["cupti"]["deferred"]


def test_defers_to_a_running_torch_profiler():
    """torch.profiler recording (Kineto) at start: the plugin leaves CUPTI to it."""
    torch = pytest.importorskip("torch")
    fake = FakeCupti()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        p, ctx = started(fake)
    assert not fake.subscribed and len(ctx.warnings) == 1 and "torch.profiler" in ctx.warnings[0]
    p.stop()
    assert p.collect().n_events == 0


def test_torch_plugin_leaves_cuda_to_cupti():
    """While the cupti plugin records, the torch plugin asks torch.profiler for no CUDA
    activity (every kernel once, from CUPTI)."""
    torch = pytest.importorskip("torch")
    from polyprof.plugins.torch.plugin import TorchPlugin

    class CudaTorch:  # torch as it looks on a CUDA machine
        profiler = torch.profiler
        cuda = type("cuda", (), {"is_available": staticmethod(lambda: True)})

    PA = torch.profiler.ProfilerActivity
    tp = TorchPlugin(activities=["cpu", "cuda"])
    assert PA.CUDA in tp._activities(CudaTorch)
    fake = FakeCupti()
    p, ctx = started(fake)
    try:
        assert PA.CUDA not in tp._activities(CudaTorch)
        assert PA.CUDA not in TorchPlugin()._activities(CudaTorch)
    finally:
        p.stop()
    assert PA.CUDA in tp._activities(CudaTorch)


def _driver_here() -> bool:
    from polyprof.plugins.cupti.availability import problem

    return problem() is None


#: tests of the machine without an NVIDIA driver (CI's): on a GPU machine the driver is there
no_driver = pytest.mark.skipif(_driver_here(), reason="an NVIDIA driver and device are present here")


@no_driver
def test_cannot_run_here_says_why_in_one_line():
    """No driver on this machine: availability is one line naming what is missing, and
    importing polyprof and the plugin never fails."""
    from polyprof.plugins.cupti.availability import problem, session_problem

    a = CuptiPlugin.availability()
    assert not a.ok and "\n" not in a.reason and ("driver" in a.reason or "device" in a.reason), a.reason
    assert session_problem() == problem() or not CuptiPlugin.session_availability().ok
    code = ("import sys; sys.modules['cupti'] = None; import polyprof; "
            "from polyprof.plugins.cupti import CuptiPlugin as P; print(P.availability().reason)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0 and r.stdout.strip().startswith("cupti-python"), r.stderr


def test_polyprof_plugins_lists_the_reason(tmp_path):
    """`polyprof plugins` (the entry point in pyproject.toml) shows cupti, unavailable,
    with its one-line reason."""
    import tomllib

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["polyprof.plugins"]
    assert eps["cupti"] == "polyprof.plugins.cupti:CuptiPlugin"
    site = tmp_path / "site" / "polyprof-9.9.dist-info"
    site.mkdir(parents=True)
    (site / "entry_points.txt").write_text("[polyprof.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: polyprof\nVersion: 9.9\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT / "src")]),
           "COLUMNS": "250"}
    r = subprocess.run([sys.executable, "-m", "polyprof", "plugins"], capture_output=True, text=True,
                       timeout=120, env=env)
    line = next(ln for ln in r.stdout.splitlines() if "cupti" in ln)
    assert "no" in line and CuptiPlugin.availability().reason[:40] in line, r.stdout


class KitCupti(CuptiPlugin):
    """The cupti plugin over the fake device layer (the only fake: the kit drives the
    plugin's real start/stop/collect, decoding and conversion)."""

    current: FakeCupti | None = None

    def __init__(self, **options):
        fake = FakeCupti()
        KitCupti.current = fake
        super().__init__(device=fake, clock_interval_s=0.02, **options)

    @classmethod
    def availability(cls):
        from polyprof.collect.plugin import Availability

        return Availability(True)

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """Launches on the fake GPU as a CUDA program makes them, for ``seconds``."""
        import threading

        fake = KitCupti.current
        tid = threading.get_native_id()
        end = time.perf_counter() + seconds
        corr = 1
        while time.perf_counter() < end:
            if fake is not None and fake.subscribed:
                a = now_ns()
                fake.api(211, a, a + 500, corr, tid)
                fake.kernel("kit_kernel", a + 1_000, a + 2_000, corr)
                corr += 1
            time.sleep(0.001)


def test_conformance_kit_passes_over_a_fake_device_layer():
    """The kit's clauses against the plugin; only the device layer is a fake."""
    from polyprof.collect.conformance import Limits, check

    report = check("test_cupti:KitCupti", limits=Limits(activity_s=0.1))
    assert report.ok, [(r.id, r.status, r.reason) for r in report.results]
    assert "empty" not in report.result("valid_trace").reason


def test_records_cut_by_the_flush():
    """A forced flush hands over work still running (end 0: kept, no duration,
    ``incomplete``) and work not begun (start 0: no place in time, counted, dropped)."""
    from polyprof.trace.clock import constant

    recs = [record(layout.CONCURRENT_KERNEL, start=5_000, end=6_000, correlation_id=1, stream_id=3, name=0),
            record(layout.CONCURRENT_KERNEL, start=7_000, end=0, correlation_id=2, stream_id=3, name=0),
            record(layout.CONCURRENT_KERNEL, start=0, end=0, correlation_id=3, stream_id=3, name=0),
            record(layout.MEMCPY, start=0, end=0, correlation_id=4, stream_id=3)]
    sink = buffers.PySink()
    deliver(sink, recs, 1 << 16)
    conv = convert.Converter(buffers.Records.of(sink.take()), constant(1_000_000, 10.0, "test"))
    tr = conv.build()
    assert tr.n_events == 2 and conv.counts["kernels_without_start"] == 1 and conv.counts["memcpy_without_start"] == 1
    assert sorted(tr.events["start_ns"].tolist()) == [1_005_000, 1_007_000]
    assert sorted(tr.events["dur_ns"].tolist()) == [0, 1_000]
    m, v = tr.stats[keys.INCOMPLETE].lookup(np.arange(2))
    assert m.sum() == 1 and tr.events["dur_ns"][np.flatnonzero(m)[0]] == 0


def test_session_with_torch_and_cupti_records_each_kernel_once(monkeypatch):
    """Both plugins in one session, in either order: the first to take CUPTI records the
    device activity. cupti first: torch asks torch.profiler for CPU only. torch first (its
    profiler running): cupti defers quietly to the session's own torch plugin."""
    torch = pytest.importorskip("torch")
    from polyprof.plugins.torch import plugin as torch_plugin

    calls = []
    real = torch_plugin.default_activities
    monkeypatch.setattr(torch_plugin, "default_activities",
                        lambda t: real(t) + [t.profiler.ProfilerActivity.CUDA])  # as on a CUDA machine
    monkeypatch.setattr(torch.profiler, "profile", lambda **kw: calls.append(kw["activities"]) or _Prof())
    ctx = SessionContext(start_ns=now_ns(), wall_anchor={})
    PA = torch.profiler.ProfilerActivity
    # cupti first (a default session starts plugins in name order)
    fake = FakeCupti()
    cp = CuptiPlugin(device=fake, clock_interval_s=0)
    tp = torch_plugin.TorchPlugin()
    cp.start(ctx)
    tp.start(ctx)
    assert calls[-1] == [PA.CPU] and fake.subscribed
    tp.stop()
    cp.stop()
    # torch first: its torch.profiler records CUDA; cupti leaves CUPTI to it, without a warning
    tp2, cp2 = torch_plugin.TorchPlugin(), CuptiPlugin(device=FakeCupti(), clock_interval_s=0)
    ctx2 = SessionContext(start_ns=now_ns(), wall_anchor={})
    tp2.start(ctx2)
    assert PA.CUDA in calls[-1]
    monkeypatch.setattr(torch._C._autograd, "_profiler_enabled", lambda: True)
    cp2.start(ctx2)
    assert cp2._deferred and "torch plugin" in cp2._deferred and not ctx2.warnings
    cp2.stop()
    tp2.stop()


class _Prof:
    """torch.profiler.profile, as far as the torch plugin's start and stop use it."""

    def start(self):
        pass

    def stop(self):
        pass


def test_torch_drop_in_leaves_cuda_to_a_recording_cupti_plugin():
    """polyprof.torch.profile started while the cupti plugin records (under polyprof run):
    its torch.profiler is asked for no CUDA activity."""
    torch = pytest.importorskip("torch")
    from polyprof.plugins.torch import plugin as torch_plugin

    PA = torch.profiler.ProfilerActivity
    ctx = SessionContext(start_ns=now_ns(), wall_anchor={})
    cp = CuptiPlugin(device=FakeCupti(), clock_interval_s=0)
    tp = torch_plugin.TorchPlugin()
    cp.start(ctx)
    tp.start(ctx)
    try:
        drop_in = type("DropIn", (), {"activities": {PA.CPU, PA.CUDA}})()
        assert tp.attach_driver(drop_in)
        assert drop_in.activities == {PA.CPU} and any("cupti plugin" in w for w in ctx.warnings)
        tp.detach_driver(drop_in)
    finally:
        tp.stop()
        cp.stop()


def test_peer_copies_unified_memory_and_process_ranges():
    """The less common records, laid out by the binding's dtypes: a peer-to-peer copy, a
    context-wide synchronisation, unified-memory transfers and faults, an NVTX
    start/end range bound to the process rather than a thread."""
    from polyprof.trace.clock import constant

    pid = os.getpid()
    recs = [record(layout.CONTEXT, context_id=4, device_id=1),
            record(layout.MEMCPY2, start=1_000, end=3_000, bytes=4096, copy_kind=10, src_kind=3, dst_kind=3,
                   device_id=1, context_id=4, stream_id=9, src_device_id=1, dst_device_id=0, correlation_id=5),
            record(layout.SYNCHRONIZATION, start=4_000, end=4_500, type=4, context_id=4, stream_id=0xFFFFFFFF,
                   correlation_id=6),
            record(layout.UNIFIED_MEMORY_COUNTER, counter_kind=1, value=65536, start=5_000, end=6_000,
                   address=0x7000, src_id=0, dst_id=1),
            record(layout.UNIFIED_MEMORY_COUNTER, counter_kind=4, value=3, start=7_000, end=7_500, dst_id=1),
            record(layout.MARKER, flags=layout.MARKER_START, timestamp=8_000, id=7, object_kind=layout.OBJECT_PROCESS,
                   process_id=pid),
            record(layout.MARKER, flags=layout.MARKER_END, timestamp=9_000, id=7, object_kind=layout.OBJECT_PROCESS,
                   process_id=pid)]
    sink = buffers.PySink()
    deliver(sink, recs, 1 << 16)
    rec = buffers.Records.of(sink.take())
    assert list(rec.kinds) == [int(r["kind"][0]) for r in recs]
    tr = convert.Converter(rec, constant(0, 1.0, "test")).build()
    s = np.array(tr.strings, object)
    ev = {s[n]: (i, s[c], tr.planes[tr.track_plane[t]].name, tr.tracks[t].name) for i, (n, c, t) in
          enumerate(zip(tr.events["name"], tr.events["category"], tr.events["track"]))}
    assert ev.keys() == {"Memcpy PtoP (Device -> Device)", "Context Sync", "Unified Memory HtoD",
                         "Unified Memory GPU Page Fault", ""}
    cp = ev["Memcpy PtoP (Device -> Device)"]
    assert cp[1:] == (keys.CAT_MEMCPY, "/device:GPU:1", "Stream 9")
    assert tr.stats["dst device"].lookup(np.array([cp[0]]))[1][0] == 0
    assert ev["Context Sync"][1:] == (convert.CAT_SYNC, "/device:GPU:1", "Context Sync")  # device from CONTEXT
    # its stream 0xFFFFFFFF ("not applicable") is -1, as Kineto writes it and HTA skips
    sync = np.array([ev["Context Sync"][0]])
    assert tr.stats[keys.STREAM].lookup(sync)[1].tolist() == [-1]
    um = ev["Unified Memory HtoD"]
    assert um[1:] == (keys.CAT_MEMCPY, "/device:GPU:1", "Unified Memory")
    assert tr.stats[keys.BYTES].lookup(np.array([um[0]]))[1][0] == 65536
    assert ev["Unified Memory GPU Page Fault"][1] == convert.CAT_UNIFIED
    rng = ev[""]
    assert rng[1:] == (convert.CAT_ANNOTATION, keys.HOST_PLANE, "NVTX (process)")
    assert tr.events["dur_ns"][rng[0]] == 1_000


@no_driver
def test_real_device_layer_without_a_driver():
    """cupti-python's device layer as it is here (no driver): the plugin defers at start
    with the binding's reason in one line; libcupti has the three functions the C sink
    registers and walks with."""
    from polyprof.plugins.cupti.device import CuptiDevice

    dev = CuptiDevice()
    for fn in ("cuptiActivityRegisterCallbacks", "cuptiActivityGetNextRecord", "cuptiActivityGetNumDroppedRecords"):
        assert dev._address(fn) != 0, fn
    p = CuptiPlugin()
    ctx = SessionContext(start_ns=now_ns(), wall_anchor={})
    p.start(ctx)
    p.stop()
    tr = p.collect()
    assert len(ctx.warnings) == 1 and "CUDA driver is not found" in ctx.warnings[0], ctx.warnings
    assert "\n" not in ctx.warnings[0] and tr.n_events == 0 and not holder.holds_cupti()


def test_schedule_pauses_cupti_recording():
    """A session schedule's paused steps: CUPTI makes no activity records (the kinds are
    disabled, devices and contexts stay on); a pause before start starts paused."""
    fake = FakeCupti()
    p = CuptiPlugin(device=fake, clock_interval_s=0)
    p.pause()  # the schedule's step 0 is a wait step
    p.start(SessionContext(start_ns=now_ns(), wall_anchor={}))
    assert fake.enabled == {layout.DEVICE, layout.CONTEXT}
    t = now_ns()
    fake.kernel("skipped", t, t + 100, 1)
    p.resume()
    assert layout.CONCURRENT_KERNEL in fake.enabled and layout.MARKER in fake.enabled
    fake.kernel("kept", t + 200, t + 300, 2)
    p.pause()
    fake.kernel("skipped", t + 400, t + 500, 3)
    assert fake.enabled == {layout.DEVICE, layout.CONTEXT}
    p.stop()
    assert not fake.enabled
    tr = p.collect()
    assert [tr.strings[i] for i in tr.events["name"]] == ["kept"]


@needs_c
def test_c_sink_under_concurrent_completions_and_full_buffers():
    """CUPTI completes buffers from its own threads: four threads each completing full
    8 MiB buffers (33,825 kernel records: the record arrays grow) at once; every record
    arrives, in buffer order per thread, and CUPTI's dropped count is summed."""
    import threading

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t))
    def dropped(ctx, stream, out):
        out[0] = 2
        return 0

    walker = FakeCupti._walker()
    sink = buffers.CSink(ctypes.cast(walker, ctypes.c_void_p).value, ctypes.cast(dropped, ctypes.c_void_p).value)
    n = (8 << 20) // 248
    per_thread = []
    for t in range(4):
        r = np.zeros(n, dtype_of(layout.CONCURRENT_KERNEL))
        r["kind"] = layout.CONCURRENT_KERNEL
        r["correlation_id"] = np.arange(n) + t * n
        per_thread.append([r[i:i + 1] for i in range(n)])
    threads = [threading.Thread(target=deliver, args=(sink, recs, 8 << 20)) for recs in per_thread]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    counts = sink.counts()
    assert counts["records"] == 4 * n and counts["buffers_completed"] == 4 and counts["dropped"] == 8
    rec = buffers.Records.of(sink.take())
    corr = decode.column(rec, np.arange(len(rec.kinds)), layout.KERNEL_FIELDS["correlation_id"])
    assert sorted(corr.tolist()) == list(range(4 * n))
    assert sink.take() == []  # taken once


@needs_c
def test_dropped_records_are_reported():
    """CUPTI dropped records (its buffers were full): one warning, with the count."""
    fake = FakeCupti()
    fake.dropped = 17
    p, ctx = started(fake, implementation="c")
    t = now_ns()
    fake.kernel("k", t, t + 10, 1)
    assert p.time_limited  # stop calls CUPTI
    p.stop()
    assert not p.time_limited  # collect is work on memory
    tr = p.collect()
    assert tr.metadata["cupti"]["buffers"]["dropped"] == 17
    assert any("dropped 17 activity records" in w for w in ctx.warnings), ctx.warnings


@needs_c
def test_c_sink_takes_empty_buffers():
    """CUPTI may complete a buffer with no records (a flush with nothing recorded)."""
    sink = buffers.CSink(ctypes.cast(FakeCupti._walker(), ctypes.c_void_p).value, 0)
    req, done = sink.addresses()
    ptr, size, maxn = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    REQUEST(req)(ctypes.byref(ptr), ctypes.byref(size), ctypes.byref(maxn))
    COMPLETE(done)(None, 0, ptr.value, size.value, 0)
    COMPLETE(done)(None, 0, None, 0, 0)  # and a NULL buffer
    batches = sink.take()
    assert len(batches) == 2 and all(b.records == b"" and b.kinds == b"" for b in batches)
    rec = buffers.Records.of(batches)
    assert len(rec.kinds) == 0 and len(decode.texts(rec, np.zeros(0, np.int64))) == 0


@needs_c
def test_c_sink_notes_a_walk_cut_short():
    """A record CUPTI's walker cannot size (CUPTI_ERROR_INVALID_KIND) ends the walk of its
    buffer: the records before it are kept, and the counts say a walk was cut short."""
    sizes = {k: dtype_of(k).itemsize for k in layout.DTYPE_NAMES}

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
    def walker(buf, valid, rec):
        off = 0 if not rec[0] else rec[0] - buf + sizes[ctypes.c_int32.from_address(rec[0]).value]
        if off >= valid:
            return layout.ERROR_MAX_LIMIT_REACHED
        if ctypes.c_int32.from_address(buf + off).value not in sizes:
            return 21  # CUPTI_ERROR_INVALID_KIND
        rec[0] = buf + off
        return 0

    sink = buffers.CSink(ctypes.cast(walker, ctypes.c_void_p).value, 0)
    odd = np.zeros(1, [("kind", "<i4"), ("pad", "<i4")])
    odd["kind"] = 99
    deliver(sink, [record(layout.RUNTIME, cbid=211), odd, record(layout.RUNTIME, cbid=31)], 1 << 16)
    assert sink.counts()["walks_cut_short"] == 1
    rec = buffers.Records.of(sink.take())
    assert list(rec.kinds) == [layout.RUNTIME]


def test_gpu_check_reads_what_it_compares(tmp_path):
    """scripts/gpu_check_cupti.py's reading side, on a session recorded over the fake
    device layer: kernel count and time from the polyprof trace and from the same trace
    as Kineto JSON (what torch.profiler writes) agree, the NVTX section is projected, the
    clock fit is found."""
    import importlib.util
    import threading

    import polyprof
    from polyprof.analyze.frames import column
    from polyprof.analyze.sections import section_stats
    from polyprof.trace.metadata_keys import clock_fits

    spec = importlib.util.spec_from_file_location("gpu_check_cupti", ROOT / "scripts" / "gpu_check_cupti.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    fake = FakeCupti()
    out = tmp_path / "run.polyprof"
    with polyprof.profile(plugins=["host", CuptiPlugin(device=fake, clock_interval_s=0)], output=out):
        workload_records(fake, n=50, tid=threading.get_native_id())
    t = polyprof.load(out)
    polyprof.export(t, tmp_path / "run.json", format="kineto")
    n, ns = gpu_check.kernels(t)
    assert (n, ns) == gpu_check.kernels(polyprof.load(tmp_path / "run.json")) and n == 50
    st = section_stats(t)
    i = list(column(st, "name")).index("forward")
    assert column(st, "device_ops")[i] == 52 and column(st, "projected_ns")[i] > 0
    assert [plugin for _p, plugin, _f in clock_fits(t.metadata)] == ["cupti"]


class BareRecord:
    """A record object as cupti-python 13.0.1 hands it over: its kind and address, no
    buffer protocol (13.0.1's ``ActivityAPI`` ... have none)."""

    __slots__ = ("kind", "ptr")

    def __init__(self, kind: int, ptr: int) -> None:
        self.kind, self.ptr = kind, ptr


def test_python_sink_needs_only_kind_and_ptr():
    """The Python sink reads a buffer from the records' addresses: the binding's 13.4 record
    objects and bare (kind, ptr) objects without the buffer protocol give the same bytes,
    offsets, kinds and texts."""
    fake = FakeCupti(t0=10**12)
    workload_records(fake, n=40, t=10**12)
    objs, buf = binding_records(fake.pending, 1 << 20)
    bare = [BareRecord(int(o.kind), int(o.ptr)) for o in objs]
    with pytest.raises(TypeError):
        memoryview(bare[0])  # type: ignore[arg-type]
    out = []
    for recs in (objs, bare):
        sink = buffers.PySink(1 << 20)
        sink.complete(recs)
        assert not sink.problems and sink.counts()["records"] == len(recs)
        out.append(buffers.Records.of(sink.take()))
    a, b = out
    assert a.blob.tobytes() == b.blob.tobytes() and a.arena == b.arena
    assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.kinds, b.kinds)
    k = decode.rows_of(b, [layout.CONCURRENT_KERNEL])
    assert len(k) == 40 and set(decode.texts(b, k, 0)) == {"_Z6kernelPfi", "gemm_tile"}
    m = decode.rows_of(b, [layout.MARKER])
    assert list(decode.texts(b, m, 1))[:1] == ["polyprof-test"]
    del buf


def test_python_sink_failure_is_said_not_silent(caplog):
    """A buffer the Python sink cannot read (here: records without an address) is a problem
    line in the cupti metadata and a session warning; its records count as dropped."""

    class NoAddress:
        kind = layout.CONCURRENT_KERNEL

    os.environ.pop("NVTX_INJECTION64_PATH", None)
    fake = FakeCupti()
    p, ctx = started(fake, implementation="python")
    workload_records(fake, n=20, tid=4242)
    fake.sink_obj.complete([NoAddress(), NoAddress(), NoAddress()])
    p.stop()
    with caplog.at_level("WARNING", logger="polyprof"):
        tr = p.collect()
    md = tr.metadata["cupti"]
    assert md["buffers"]["dropped"] == 3 and md["buffers"]["buffers_not_read"] == 1
    line = ("the Python buffer sink could not read a completed CUPTI buffer of 3 records (AttributeError: ")
    assert [x for x in md["problems"] if x.startswith(line)] and any(line in w for w in ctx.warnings)
    assert len(tr.names()[tr.categories() == keys.CAT_KERNEL]) == 20  # the readable buffers are all there


def test_cupti_leaves_nvtx_to_polyprofs_library(monkeypatch):
    """NVTX_INJECTION64_PATH naming polyprof's own library (the host plugin set it): the
    cupti plugin neither points NVTX at libcupti nor enables CUPTI's MARKER kind."""
    from polyprof.plugins.nvtx import recorder

    if recorder.library_path() is None:
        pytest.skip("_nvtxinject not built (setup.py build_ext)")
    monkeypatch.setenv("NVTX_INJECTION64_PATH", str(recorder.library_path()))
    fake = FakeCupti()
    p, _ctx = started(fake)
    assert os.environ["NVTX_INJECTION64_PATH"] == str(recorder.library_path())
    assert layout.MARKER not in fake.enabled and layout.CONCURRENT_KERNEL in fake.enabled
    p.stop()
    assert os.environ["NVTX_INJECTION64_PATH"] == str(recorder.library_path())  # not the cupti plugin's to unset
    assert p.collect().metadata["cupti"]["nvtx"] == "polyprof"
