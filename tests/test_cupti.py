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

import ctypes
import os

import numpy as np
import pytest

cupti_binding = pytest.importorskip("cupti.cupti", reason="cupti-python is not installed")

from polyprof.collect.clock import now_ns  # noqa: E402
from polyprof.plugins.cupti import buffers, decode, layout  # noqa: E402

needs_c = pytest.mark.skipif(buffers._cuptibuf is None, reason="_cuptibuf not built (setup.py build_ext)")

# ----------------------------------------------------------------------------- records


def dtype_of(kind: int) -> np.dtype:
    return getattr(cupti_binding, layout.DTYPE_NAMES[kind])


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

    def sink(self, implementation: str = buffers.IMPLEMENTATION, buffer_bytes: int = 8 << 20):
        if implementation == "c":
            self.sink_obj = buffers.CSink(ctypes.cast(self._next, ctypes.c_void_p).value, 0, buffer_bytes)
        else:
            self.sink_obj = buffers.PySink(buffer_bytes)
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
        else:
            objs = []
            for r in chunk:
                cls = getattr(cupti_binding, "Activity" + layout.STRUCTS[int(r["kind"][0])])
                objs.append(cls.from_ptr(r.ctypes.data))  # the binding's own record object (a copy)
            sink.complete(objs)


# ----------------------------------------------------------------------------- layout


def test_layout_offsets_are_the_bindings():
    """Every field the decoder reads sits where cupti-python's dtype of CUPTI's struct
    says, with the same type; the record sizes are the dtypes' itemsizes."""
    for kind, fields in layout.FIELDS.items():
        dt = dtype_of(kind)
        assert layout.RECORD_SIZE[kind] == dt.itemsize, layout.KIND_NAMES[kind]
        for name, f in fields.items():
            if name in ("process_id", "thread_id") and kind == layout.MARKER:
                sub, base = dt.fields["object_id"]
                t, o = sub.fields["pt"][0].fields[name]
                assert (base + o, t.str) == (f.offset, f.dtype)
                continue
            key = {"flags": "flags_"}.get(name, name) if name not in dt.fields else name
            t, o = dt.fields[key][:2]
            expect = "<u8" if t.str == "<i8" and name in ("name", "domain") else t.str  # char* as uint64
            assert (o, expect) == (f.offset, f.dtype.replace("<u1", "|u1")) or (o, expect) == (
                f.offset, f.dtype), (layout.KIND_NAMES[kind], name, o, t.str, f)
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
    fake.api(41, a, a + 3_000, corr, tid)
    fake.memcpy(a + 500, a + 2_500, corr, 1 << 20)
    corr += 1
    fake.api(44, a + 4_000, a + 4_500, corr, tid)
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
