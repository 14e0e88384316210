"""nvprof's output files (``nvprof -o output.nvvp``: an SQLite database of CUPTI records)
read into the common schema. The file is a real one (tests/data/peers/blinkplus_nccl/:
nvprof of CUDA 11.5 on an NCCL demo over four V100s, kept xz-compressed); every number
the test expects is also asked of the database with SQL, not only of polyprof."""

from __future__ import annotations

import ctypes
import ctypes.util
import lzma
import shutil
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.cli import main
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect, why_not_a_trace

NVVP = Path(__file__).parent / "data" / "peers" / "blinkplus_nccl" / "output.nvvp.xz"


@pytest.fixture(scope="module")
def nvvp(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nvprof") / "output.nvvp"
    out.write_bytes(lzma.decompress(NVVP.read_bytes()))
    return out


@pytest.fixture(scope="module")
def trace(nvvp):
    return polyprof.load(nvvp)


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute(query).fetchall()


def _of(trace, category: str) -> np.ndarray:
    return np.flatnonzero(trace.categories() == category)


def test_every_kernel_copy_memset_and_call_is_read(nvvp, trace):
    assert detect(nvvp) == "nvprof"
    counts = Counter(trace.categories().tolist())
    want = {"cuda_runtime": "RUNTIME", "cuda_driver": "DRIVER", "kernel": "CONCURRENT_KERNEL",
            "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET"}
    for cat, table in want.items():
        assert counts[cat] == _sql(nvvp, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{table}")[0][0]
    assert dict(counts) == {"cuda_runtime": 2685, "cuda_driver": 2051, "kernel": 24, "gpu_memcpy": 124,
                            "gpu_memset": 172}
    assert [p.name for p in trace.planes] == ["/host:CPU", "/device:GPU:0", "/device:GPU:1", "/device:GPU:2",
                                              "/device:GPU:3"]
    assert len([t for t in trace.tracks if t.kind == "thread"]) == 8  # nvprof's threads of the one process


def test_kernels_copies_and_fills_keep_their_times_names_and_bytes(nvvp, trace):
    k = _of(trace, "kernel")
    assert int(trace.events["dur_ns"][k].sum()) == _sql(
        nvvp, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")[0][0] == 622_776_453
    assert Counter(trace.names()[k].tolist()) == {"ncclAllReduceTreeLLKernel_sum_i32(ncclColl)": 12,
                                                  "ncclBroadcastRingLLKernel_copy_i8(ncclColl)": 12}
    assert int(trace.events["start_ns"][k].min()) == 1_650_739_317_639_000_051  # CUPTI's ns, as written
    grid = trace.stats["grid"].dense(trace.n_events)
    assert set(grid[k].tolist()) == {"2,1,1"}
    c = _of(trace, "gpu_memcpy")
    assert set(trace.names()[c].tolist()) == {"Memcpy HtoD (Pageable -> Device)"}  # CUPTI's memory kinds
    assert int(np.nansum(trace.stats["bytes"].dense(trace.n_events, np.nan)[c].astype(float))) == 22_192
    m = _of(trace, "gpu_memset")
    assert int(np.nansum(trace.stats["bytes"].dense(trace.n_events, np.nan)[m].astype(float))) == _sql(
        nvvp, "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0][0] == 880_840_912


def _cxxfilt(names: list[str]) -> list[str]:
    """``names`` as binutils' c++filt prints them, else as the C++ runtime's
    ``__cxa_demangle`` does (called here, apart from polyprof's ``lowlevel/demangle.py``)."""
    if shutil.which("c++filt"):
        return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                              check=True).stdout.splitlines()
    lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    lib.__cxa_demangle.restype = ctypes.c_char_p  # (leaks the few strings: a test)
    out = []
    for n in names:
        status = ctypes.c_int(0)
        got = lib.__cxa_demangle(n.encode(), None, None, ctypes.byref(status))
        out.append(got.decode() if status.value == 0 and got else n)
    return out


def test_kernel_names_are_demangled_as_cxxfilt_prints_them(nvvp, trace):
    """nvprof keeps CUPTI's mangled kernel names (StringTable holds no other); they read
    as nvprof, Nsight and polyprof's CUPTI plugin show them."""
    stored = _sql(nvvp, "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k "
                        "JOIN StringTable s ON s._id_ = k.name GROUP BY s.value ORDER BY s.value")
    assert stored == [("_Z33ncclAllReduceTreeLLKernel_sum_i328ncclColl", 12),
                      ("_Z33ncclBroadcastRingLLKernel_copy_i88ncclColl", 12)]
    want = dict(zip(_cxxfilt([n for n, _ in stored]), (c for _, c in stored)))
    assert want == {"ncclAllReduceTreeLLKernel_sum_i32(ncclColl)": 12, "ncclBroadcastRingLLKernel_copy_i8(ncclColl)": 12}
    assert Counter(trace.names()[_of(trace, "kernel")].tolist()) == want


def test_calls_are_named_and_linked_to_their_device_work_by_correlation_id(nvvp, trace):
    names = trace.names()
    api = _of(trace, "cuda_runtime")
    assert Counter(names[api].tolist()).most_common(3) == [("cudaGetDevice", 929), ("cudaDeviceGetPCIBusId", 368),
                                                            ("cudaFree", 184)]
    assert Counter(names[_of(trace, "cuda_driver")].tolist())["cuDeviceGetAttribute"] == 1592
    src, dst = trace.flows["src"], trace.flows["dst"]
    pairs = Counter((names[s], trace.categories()[d]) for s, d in zip(src.tolist(), dst.tolist()))
    launched = _sql(nvvp, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k JOIN "
                          "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId")[0][0]
    assert pairs == {("cudaLaunchCooperativeKernelMultiDevice", "kernel"): launched,
                     ("cudaMemcpy", "gpu_memcpy"): 124, ("cudaMemset", "gpu_memset"): 172}
    assert launched == 24
    corr = trace.stats["correlation_id"].dense(trace.n_events)
    assert all(corr[s] == corr[d] for s, d in zip(src.tolist(), dst.tolist()))


def test_devices_and_clock(trace):
    props = {p.name: p.properties for p in trace.planes}
    gpu0 = props["/device:GPU:0"]
    assert gpu0["name"] == "Tesla V100-SXM2-32GB" and gpu0["numSms"] == 80 and gpu0["computeMajor"] == 7
    assert gpu0["totalGlobalMem"] == 34_089_926_656
    assert trace.metadata["nvprof"]["version"] == 16
    assert "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in trace.metadata["nvprof"]["tables_not_read"]
    assert trace.metadata["wall_anchor"] == {"mono_ns": 0, "wall_ns": 0, "uncertainty_ns": 0}


def test_summary_matches_every_device_activity_to_its_call(nvvp, capsys):
    assert main(["summary", str(nvvp)]) == 0
    out = capsys.readouterr().out
    assert "5056 events on 5 plane(s)" in out and "matched by id 320" in out and "unmatched 0" in out


def test_driver_calls_alone_still_give_device_work_its_process(nvvp, tmp_path):
    """A program that calls the driver API (no runtime table rows: PyCUDA's, say)."""
    p = tmp_path / "driver_only.nvprof"
    p.write_bytes(nvvp.read_bytes())
    with sqlite3.connect(p) as conn:
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    t = polyprof.load(p)
    assert len(t.sources) == 1 and t.n_events == 5056 - 2685 and len(t.flows["src"]) == 0
    assert len(_of(t, "kernel")) == 24


def test_a_file_with_nothing_read_says_so(nvvp, tmp_path):
    p = tmp_path / "empty.nvvp"
    p.write_bytes(nvvp.read_bytes())
    with sqlite3.connect(p) as conn:
        for table in ("RUNTIME", "DRIVER", "CONCURRENT_KERNEL", "MEMCPY", "MEMSET"):
            conn.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_{table}")
    t = polyprof.load(p)
    assert t.n_events == 0
    assert t.metadata["warnings"][0].startswith("nothing polyprof reads: no kernel, copy, memset, runtime or "
                                                "driver rows (the file holds other data; its tables with rows: ")


def test_a_truncated_file_is_refused_naming_it(nvvp, tmp_path):
    p = tmp_path / "cut.nvvp"
    p.write_bytes(nvvp.read_bytes()[:200_000])
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    assert str(ei.value).startswith(f"{p}: ")


def test_a_directory_of_nvprof_files_is_read_as_ranks(nvvp, tmp_path):
    from polyprof.ranks.sources import resolve  # a job's directory: how its files are listed

    for name in ("rank0.nvvp", "rank1.nvprof"):
        (tmp_path / name).write_bytes(nvvp.read_bytes())
    assert [(s.label, s.load().n_events) for s in resolve(tmp_path)] == [("rank0.nvvp", 5056), ("rank1.nvprof", 5056)]


def test_a_visual_profiler_session_is_told_from_nvprofs_data(tmp_path):
    """NVVP saves its sessions as ``.nvvp`` too: XML (as in AtilaSaraiva/GPU-Born-Modeling's
    profile.nvvp, whose first lines these are), not nvprof's database."""
    p = tmp_path / "profile.nvvp"
    p.write_text('<?xml version="1.0"?>\n<session version="2" name="profile.nvvp" hscale="1.0E-6" '
                 'normalize="false">\n<timelineoptions enabletimerange="false" start="-1" end="-1"/>\n</session>\n')
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    assert str(ei.value) == (f"{p}: an NVIDIA Visual Profiler session (XML: its timeline's layout and the command "
                             "it profiled), not the profile data polyprof reads: give it the file nvprof writes "
                             "(nvprof -o FILE.nvvp PROGRAM: an SQLite database)")


def test_a_call_that_launched_on_several_devices_counts_once_on_each(trace):
    """cudaLaunchCooperativeKernelMultiDevice puts a kernel on each of the 4 GPUs with one
    call: the launch table counted the call on its first device only (launches 0 and a
    NaN mean call time on GPU1-3, with a NumPy warning)."""
    from polyprof.analyze.ops import launch_summary
    from polyprof.analyze.frames import column

    t = launch_summary(trace)
    coop = column(t, "launch_name") == "cudaLaunchCooperativeKernelMultiDevice"
    got = dict(zip(column(t, "plane")[coop].tolist(), zip(column(t, "count")[coop].tolist(),
                                                          column(t, "launches")[coop].tolist())))
    assert got == {"/device:GPU:0": (8, 8), "/device:GPU:1": (8, 8), "/device:GPU:2": (4, 4), "/device:GPU:3": (4, 4)}
    assert np.isfinite(column(t, "cpu_mean_ns")[coop]).all()


def test_nvtx_ranges_and_marks_are_read_on_their_thread(nvvp, tmp_path):
    """NVTX in nvprof's layout (as NCCL's ranges are in ZhangXin8069/qcu's public
    log_x99-Yang_*.nvvp: 4,222 of them): a start and an end row per range with the same
    id, the name on the start, the thread in ``objectId`` (process and thread ids, 32-bit
    little-endian); a mark is one instantaneous row. A range never ended is left out, said."""
    import struct

    p = tmp_path / "nvtx.nvvp"
    p.write_bytes(nvvp.read_bytes())
    with sqlite3.connect(p) as conn:
        pid, tid, t0, t1 = conn.execute("SELECT processId, threadId, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                        "WHERE correlationId = 861").fetchone()
        conn.executemany("INSERT INTO StringTable (_id_, value) VALUES (?, ?)",
                         [(100, "train step"), (101, "NCCL"), (102, "checkpoint"), (103, "never ends")])
        obj = struct.pack("<III", pid, tid & 0xFFFFFFFF, 0)
        rows = [(2, t0 - 500, 1, 2, obj, 100, 101), (1, t0 + 7, 2, 2, obj, 102, 101),
                (2, t1 + 1, 3, 2, obj, 103, 0), (4, t1 + 900, 1, 2, obj, 0, 101)]
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MARKER (flags, timestamp, id, objectKind, objectId, name, "
                         "domain) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    t = polyprof.load(p)
    names, ev = t.names(), t.events
    (rng,), (mark,) = _of(t, "nvtx"), _of(t, "nvtx_mark")
    assert (names[rng], ev["start_ns"][rng], ev["dur_ns"][rng]) == ("train step", t0 - 500, t1 - t0 + 1400)
    assert (names[mark], ev["start_ns"][mark], ev["dur_ns"][mark]) == ("checkpoint", t0 + 7, 0)
    call = np.flatnonzero((t.categories() == "cuda_runtime") & (ev["start_ns"] == t0))
    assert ev["track"][rng] == ev["track"][mark] == ev["track"][call[0]]  # the thread that made the call
    assert t.stats.get("domain").lookup(np.array([rng, mark]))[1].tolist() == ["NCCL", "NCCL"]
    assert t.metadata["warnings"] == ["1 NVTX range(s) left out: started but never ended (the program ended or "
                                      "the profile stopped first)"]
    assert "CUPTI_ACTIVITY_KIND_MARKER" not in t.metadata["nvprof"]["tables_not_read"]


def test_rows_with_times_beyond_2_62_ns_are_left_out_and_said(nvvp, tmp_path, capsys):
    """A damaged row (a call starting at -2**63 ns) made every summary an internal error
    (OverflowError: the spans the analyses take overflow int64)."""
    p = tmp_path / "damaged.nvvp"
    p.write_bytes(nvvp.read_bytes())
    with sqlite3.connect(p) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = -9223372036854775808 WHERE correlationId = 861")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL SET end = 9223372036854775807 WHERE _id_ = "
                     "(SELECT min(_id_) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)")
    t = polyprof.load(p)
    assert t.n_events == 5056 - 2 and len(_of(t, "kernel")) == 23
    assert t.metadata["warnings"] == [
        "1 row(s) of CUPTI_ACTIVITY_KIND_RUNTIME left out: times beyond +-2**62 ns (a damaged file)",
        "1 row(s) of CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL left out: times beyond +-2**62 ns (a damaged file)"]
    assert main(["summary", str(p)]) == 0
    assert "CUPTI_ACTIVITY_KIND_RUNTIME left out" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("packer", ["xz", "gzip"])
def test_a_compressed_file_reads_as_the_plain_one(nvvp, tmp_path, monkeypatch, capsys, packer):
    """nvprof files are shared compressed (.nvvp.xz, .nvvp.gz): read by content, inflated
    into a temporary file (in TMPDIR) that is gone after; the summary is the plain file's."""
    import gzip
    import tempfile

    p = tmp_path / ("output.nvvp.xz" if packer == "xz" else "output.nvvp.gz")
    p.write_bytes(NVVP.read_bytes() if packer == "xz" else gzip.compress(nvvp.read_bytes()))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert detect(p) == "nvprof"
    assert main(["summary", "--json", str(nvvp)]) == 0
    plain = capsys.readouterr().out
    assert main(["summary", "--json", str(p)]) == 0
    assert capsys.readouterr().out == plain and len(plain) > 1_000_000
    t = polyprof.load(p)
    assert t.n_events == 5056 and Counter(t.names()[_of(t, "kernel")].tolist()) == {
        "ncclAllReduceTreeLLKernel_sum_i32(ncclColl)": 12, "ncclBroadcastRingLLKernel_copy_i8(ncclColl)": 12}
    assert list(scratch.iterdir()) == []  # every temporary copy removed


def test_a_compressed_file_past_the_inflation_limit_is_refused_naming_it(nvvp, tmp_path, monkeypatch):
    import tempfile

    from polyprof.formats import safety

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    size = nvvp.stat().st_size  # 688,128 bytes inflated
    with safety.override(max_inflated_bytes=size - 1), pytest.raises(TraceFormatError) as ei:
        polyprof.load(NVVP)
    assert str(ei.value) == (f"{NVVP}: xz data inflates to more than {size - 1:,} bytes (limit max_inflated_bytes "
                             "/ POLYPROF_MAX_INFLATED_BYTES)")
    with safety.override(max_inflated_bytes=size):  # the limit itself is allowed (and not the error cached)
        assert polyprof.load(NVVP).n_events == 5056
    assert list(scratch.iterdir()) == []


def test_compressed_damage_is_refused_naming_the_file(nvvp, tmp_path):
    """A cut .nvvp.xz says so; gzipped bytes that are no SQLite database, given to the
    nvprof reader itself, are named as such (sniffing never takes them)."""
    import gzip

    from polyprof.formats import nvprof

    cut = tmp_path / "cut.nvvp.xz"
    cut.write_bytes(NVVP.read_bytes()[:40_000])
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(cut)
    assert str(ei.value) == f"{cut}: truncated xz data: the compressed stream ends early"
    cut_gz = tmp_path / "cut.nvvp.gz"
    cut_gz.write_bytes(gzip.compress(nvvp.read_bytes())[:40_000])
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(cut_gz)
    assert str(ei.value) == f"{cut_gz}: truncated gzip data: the compressed stream ends early"
    assert why_not_a_trace(cut_gz) == ""  # in a directory: kept, for its rank to fail saying why
    other = tmp_path / "other.nvvp.gz"
    other.write_bytes(gzip.compress(b"not a database\n" * 100))
    with pytest.raises(TraceFormatError) as ei:
        nvprof.load(other)
    assert str(ei.value) == f"{other}: not an SQLite database once inflated from gzip (no 'SQLite format 3' header)"
    damaged = tmp_path / "damaged.nvvp.gz"  # nvprof's header, then zeros: no schema to read
    damaged.write_bytes(gzip.compress(nvvp.read_bytes()[:100] + bytes(nvvp.stat().st_size - 100)))
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(damaged)
    assert str(ei.value) == (f"{damaged}: a gzipped SQLite database, of no format polyprof reads compressed "
                             "(nvprof, Nsight Systems, rocpd and RPD files are) or damaged: decompress it first "
                             "(gunzip -k damaged.nvvp.gz)")


def test_a_full_disk_while_inflating_is_said_and_leaves_no_file(tmp_path, monkeypatch):
    """The temporary copy cannot be written (its disk full): one line naming the file and
    the directory, and the partial copy removed."""
    import errno
    import io
    import os
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    real = os.fdopen

    class Full(io.FileIO):
        def write(self, b):  # type: ignore[override]
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k: Full(fd, "wb") if mode == "wb" else real(fd, mode, *a, **k))
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(NVVP)
    assert str(ei.value) == (f"{NVVP}: cannot inflate it into a temporary file in {scratch} (No space left on "
                             "device; TMPDIR names another directory)")
    assert list(scratch.iterdir()) == []
