"""What cupti-python's own buffer path costs per activity record, on the CPU.

cupti-python hands a completed CUPTI buffer to Python as a list of record objects
(``ActivityKernel13`` ...). This times, per kernel record of a full 8 MiB buffer laid
out by the binding's dtype: making the binding's objects (``from_ptr``, a copy each, as
the list holds them) and polyprof's Python sink copying them back into one array
(buffers.PySink.complete: the kinds, one ``bytes.join`` of the objects' buffers, the
kernel name once per distinct pointer), against the decoding of the same buffer into columns
(decode.py), which both sinks share. The C sink (_cuptibuf.c) makes no object per
record; its cost needs libcupti's walker, so it is measured on a GPU
(scripts/gpu_check_cupti.py, "collection cost per kernel").

    PYTHONPATH=src python bench/cupti_records.py

It then converts a run of 1,000,000 launches (a kernel record and a runtime-call record
each) into a Trace (convert.Converter: events, stats, flows), the whole of collect.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time

import numpy as np
from cupti import cupti as binding

from polyprof.plugins.cupti import buffers, convert, decode, layout
from polyprof.trace.clock import constant


def main(repeats: int = 5) -> None:
    n = (8 << 20) // 248
    recs = np.zeros(n, binding.activity_kernel13_dtype)
    recs["kind"] = layout.CONCURRENT_KERNEL
    recs["start"] = np.arange(n) * 2_000
    recs["end"] = recs["start"] + 1_000
    recs["correlation_id"] = np.arange(n)
    name = ctypes.create_string_buffer(b"void at::native::vectorized_elementwise_kernel<4>(int)")
    recs["name"] = ctypes.addressof(name)  # one kernel launched n times: one shared name
    base = recs.ctypes.data
    make, sink_cost, dec = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        objs = [binding.ActivityKernel13.from_ptr(base + i * 248) for i in range(n)]
        t1 = time.perf_counter()
        sink = buffers.PySink()
        sink.complete(objs)
        t2 = time.perf_counter()
        rec = buffers.Records.of(sink.take())
        rows = decode.rows_of(rec, [layout.CONCURRENT_KERNEL])
        decode.columns(rec, rows, layout.KERNEL_FIELDS, ["start", "end", "correlation_id", "stream_id",
                                                          "device_id", "grid_x", "block_x"])
        t3 = time.perf_counter()
        make.append((t1 - t0) / n * 1e9)
        sink_cost.append((t2 - t1) / n * 1e9)
        dec.append((t3 - t2) / n * 1e9)
    print(f"records per 8 MiB buffer: {n}; load average {os.getloadavg()[0]:.1f}")
    for what, v in (("binding objects (from_ptr)", make), ("PySink copy back", sink_cost),
                    ("decode 7 columns", dec)):
        print(f"{what:28s} min {min(v):7.1f} ns/record  median {statistics.median(v):7.1f} ns/record")


def convert_launches(n: int = 1_000_000, repeats: int = 3) -> None:
    k = np.zeros(n, binding.activity_kernel13_dtype)
    k["kind"] = layout.CONCURRENT_KERNEL
    k["start"] = np.arange(n) * 2_000 + 10**9
    k["end"] = k["start"] + 1_000
    k["correlation_id"] = np.arange(n) + 1
    k["stream_id"] = 7
    k["grid_x"] = np.arange(n) % 5 + 1
    k["block_x"] = 128
    a = np.zeros(n, binding.activity_api_dtype)
    a["kind"] = layout.RUNTIME
    a["cbid"] = 211
    a["start"] = k["start"] - 1_500
    a["end"] = a["start"] + 300
    a["correlation_id"] = k["correlation_id"]
    a["thread_id"] = 1234
    rec = buffers.Records(np.concatenate([k.view(np.uint8), a.view(np.uint8)]),
                          np.concatenate([np.arange(n) * 248, n * 248 + np.arange(n) * 40]).astype(np.int64),
                          np.concatenate([np.full(n, layout.CONCURRENT_KERNEL, np.int32),
                                          np.full(n, layout.RUNTIME, np.int32)]),
                          np.full((2 * n, 2), -1, np.int64), b"")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tr = convert.Converter(rec, constant(0, 1.0, "bench")).build()
        times.append(time.perf_counter() - t0)
    print(f"convert {n} launches ({tr.n_events} events, {len(tr.flows['src'])} flows): "
          f"min {min(times):.2f} s, median {statistics.median(times):.2f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
    convert_launches()
