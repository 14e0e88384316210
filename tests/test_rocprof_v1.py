"""rocprof (v1)'s results.json: exact ns from ``BeginNs``/``EndNs``, not the µs of ``ts``/``dur``.

The document below is laid out as rocprof v1 writes it (ROCm's rocm-blogs
``roc-profiling/tracing_output_examples/HIP_results.json``, which has no licence to copy
it under; these events are typed again, their numbers taken from it): process names
``CPU HIP API``, ``COPY`` and ``GPU<n>``, every value a string, ``ts``/``dur`` whole µs.
rocprof's own ``HIP_results.stats.csv`` gives elementwise_kernel 5,280 ns and
``copy_stats.csv`` CopyHostToDevice 8,480 + 6,240 ns.
"""

from __future__ import annotations

import json

import numpy as np

import polyprof
from polyprof.trace.categories import Kind


def _event(pid: str, tid: str, name: str, begin: int, end: int, **args: str) -> dict:
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": str(begin // 1000),
            "dur": str(end // 1000 - begin // 1000),
            "args": {"BeginNs": str(begin), "EndNs": str(end), "Name": name, "DurationNs": str(end - begin), **args}}


def _doc(host_lane: str = "CPU HIP API") -> dict:
    meta = [{"args": {"name": n}, "ph": "M", "pid": p, "name": "process_name", "sort_index": i}
            for i, (n, p) in enumerate(((host_lane, 2), ("COPY", 1), ("GPU0", 6)))]
    dev = {"dev-id": "0", "queue-id": "0", "stream-id": "1"}
    events = [
        _event("1", "1", "CopyHostToDevice", 773902396463126, 773902396471606, **dev),
        _event("1", "1", "CopyHostToDevice", 773902396757046, 773902396763286, **dev),
        _event("6", "1", "elementwise_kernel", 773902406300661, 773902406305941, **dev),
        _event("2", "517", "hipLaunchKernel", 773902396900000, 773902406306206, args="( ... )"),
    ]
    return {"traceEvents": [{}, *meta, *events], "otherData": {"CMD": "rocminfo"}}


def _totals(t: polyprof.Trace) -> dict[str, tuple[int, int]]:
    """(first start, total duration) of each name."""
    out: dict[str, tuple[int, int]] = {}
    for n, s, d in zip(t.names().tolist(), t.start_ns.tolist(), t.dur_ns.tolist()):
        first, total = out.get(n, (s, 0))
        out[n] = (min(first, s), total + d)
    return out


def test_rocprof_v1_times_are_the_exact_ns(tmp_path):
    p = tmp_path / "results.json"
    p.write_text(json.dumps(_doc()))
    t = polyprof.load(p)
    got = _totals(t)
    assert got["elementwise_kernel"] == (773902406300661, 5280)  # rocprof's stats: 5,280 ns (ts/dur: 5,000)
    assert got["CopyHostToDevice"] == (773902396463126, 8480 + 6240)  # copy_stats: 14,720 ns (ts/dur: 14,000)
    assert got["hipLaunchKernel"] == (773902396900000, 9406206)
    kinds = dict(zip(t.names().tolist(), t.kinds.tolist()))
    assert kinds["elementwise_kernel"] == Kind.KERNEL and kinds["CopyHostToDevice"] == Kind.MEMCPY


def test_begin_ns_that_disagrees_with_ts_is_not_taken(tmp_path):
    doc = _doc()
    kernel = doc["traceEvents"][-2]
    kernel["args"]["BeginNs"] = "773902406299999"  # another µs than its ts: not this event's
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    assert _totals(polyprof.load(p))["elementwise_kernel"] == (773902406300000, 5000)


def test_other_traces_with_such_args_keep_their_ts(tmp_path):
    """A trace that is not rocprof v1's (no such process names) is read from ts/dur as before."""
    doc = _doc("python")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("args", {}).get("name") != "COPY"]
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    assert _totals(polyprof.load(p))["elementwise_kernel"] == (773902406300000, 5000)


def test_a_host_process_named_copy_in_another_trace_stays_the_host(tmp_path):
    """Only rocprof v1's ``COPY`` process is its device's copies: a Kineto trace whose
    host process happens to be named ``COPY`` (and has no labels) keeps its host plane,
    its launches and ops on it."""
    import gzip
    from pathlib import Path

    src = Path(__file__).resolve().parent / "data" / "traces" / "kineto" / "triton_example.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    before = polyprof.load(src)
    host = next(e["pid"] for e in doc["traceEvents"] if e.get("name") == "process_labels"
                and e["args"].get("labels") == "CPU")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("pid") == host and e.get("name") == "process_labels")]
    for e in doc["traceEvents"]:
        if e.get("pid") == host and e.get("name") == "process_name":
            e["args"]["name"] = "COPY"
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    t = polyprof.load(p)
    planes = lambda tr: sorted((pl.kind, pl.name.split(":")[0]) for pl in tr.planes)  # noqa: E731
    assert planes(t) == planes(before) and len(t.planes) == 3
    launches = np.isin(t.names(), ["cuLaunchKernel", "cudaLaunchKernel"])
    assert launches.any() and all(t.planes[t.track_plane[k]].kind == "host" for k in t.events["track"][launches])


def test_rocprof_v1_output_directory_reads_as_its_results_json(tmp_path):
    """rocprof (v1) writes results.json beside results.db and its CSV files: the database
    is not taken for a second rank (which refused the directory); the directory is the
    JSON's trace."""
    import sqlite3
    import subprocess
    import sys

    (tmp_path / "results.json").write_text(json.dumps(_doc()))
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute('CREATE TABLE KERN ("Index" INTEGER, "KernelName" TEXT, "BeginNs" INTEGER, "EndNs" INTEGER)')
        db.execute("INSERT INTO KERN VALUES (0, 'elementwise_kernel', 773902406300661, 773902406305941)")
        db.execute('CREATE TABLE HIP ("Index" INTEGER, "Name" TEXT, "BeginNs" INTEGER, "EndNs" INTEGER)')
    (tmp_path / "results.stats.csv").write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n')

    def summary(target: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "polyprof", "summary", str(target)], capture_output=True,
                              text=True, timeout=120)

    of_dir, of_json = summary(tmp_path), summary(tmp_path / "results.json")
    assert of_dir.returncode == 0 and of_json.returncode == 0, of_dir.stderr
    assert of_dir.stdout == of_json.stdout and "elementwise_kernel" in of_dir.stdout
