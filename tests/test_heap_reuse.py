"""A big load's large NumPy arrays made from freed pages (``lowlevel/_heapcache.c``,
``heap.reusing_freed_pages``): real arrays through the handler, the bound on what is
kept, its release, the handler put back after an exception and never seen by other
threads, and the Trace of every shared Kineto trace unchanged by it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from polyprof.formats import kineto
from polyprof.lowlevel import heap

from test_kineto_differential import assert_same_trace

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name  # type: ignore[no-redef]

KINETO_DIR = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
MB = 1 << 20
BIG = heap.MIN_BLOCK + 3 * 4096 + 40  # not a whole number of pages

needs_c = pytest.mark.skipif(heap.IMPLEMENTATION != "c", reason="the compiled _heapcache is not built")


def _stats() -> dict[str, int]:
    return heap.reuse_stats()


@needs_c
def test_large_arrays_reuse_freed_pages_and_hold_their_data():
    before = _stats()
    with heap.reusing_freed_pages(limit=256 * MB):
        assert get_handler_name() == "polyprof_reuse_freed_pages"
        a = np.arange(BIG // 8, dtype=np.int64)
        assert get_handler_name(a) == "polyprof_reuse_freed_pages"
        assert _stats()["live_blocks"] == before["live_blocks"] + 1
        del a
        kept = _stats()
        assert kept["kept_blocks"] >= 1 and kept["kept_bytes"] >= BIG
        b = np.zeros(BIG // 8, dtype=np.int64)  # calloc from the freed pages: must read as zeros
        after = _stats()
        assert after["reused"] == kept["reused"] + 1
        assert not b.any()
        b[:] = 7
        c = np.empty(BIG // 8 + 5000, dtype=np.int64)  # nothing kept now: a fresh mapping
        c[:] = 5
        c[-1] = len(c) - 1
        assert int(b.sum()) == 7 * len(b) and int(c[-1]) == len(c) - 1
        small = np.ones(1000)  # below MIN_BLOCK: NumPy's default handler's memory, not counted
        assert _stats()["live_blocks"] == after["live_blocks"] + 1
        del b, c, small
    end = _stats()
    assert end["kept_blocks"] == 0 and end["kept_bytes"] == 0 and end["loads"] == 0


@needs_c
def test_moved_blocks_fill_a_request_bigger_than_any_kept_one():
    with heap.reusing_freed_pages(limit=256 * MB):
        parts = [np.full(heap.MIN_BLOCK // 8, i, dtype=np.int64) for i in range(3)]
        del parts
        s = _stats()
        assert s["kept_bytes"] >= 3 * heap.MIN_BLOCK
        big = np.zeros(3 * heap.MIN_BLOCK // 8 + 100, dtype=np.int64)  # three kept blocks moved in
        t = _stats()
        assert t["moved"] >= s["moved"] + 3 and t["bytes_reused"] >= s["bytes_reused"] + 3 * heap.MIN_BLOCK
        assert not big.any()  # old pages zeroed for calloc
        big[::1000] = 1
        assert int(big.sum()) == len(range(0, len(big), 1000))
        n = len(big)
        big.resize(2 * n, refcheck=False)  # grown: mremap, or (several mappings) copied
        assert int(big[:n].sum()) == len(range(0, n, 1000)) and not big[n:].any()
        del big
        again = np.ones(8 * heap.MIN_BLOCK // 8, dtype=np.int64)  # the assembled block moved again
        assert int(again.sum()) == len(again)


@needs_c
def test_resize_in_place_keeps_the_data():
    with heap.reusing_freed_pages(limit=256 * MB):
        a = np.arange(BIG // 8, dtype=np.int64)
        a.resize(2 * len(a), refcheck=False)  # realloc of one of the handler's mappings: mremap
        assert int(a[BIG // 8 - 1]) == BIG // 8 - 1 and not a[BIG // 8:].any()
        a.resize(10, refcheck=False)
        assert a.tolist() == list(range(10))
        s = np.arange(100, dtype=np.int64)  # NumPy's block, grown past MIN_BLOCK: stays NumPy's
        s.resize(BIG // 8, refcheck=False)
        assert s[:100].tolist() == list(range(100))
        del a, s


@needs_c
def test_what_is_kept_is_bounded_and_trim_releases_it():
    limit = heap.MIN_BLOCK + heap.MIN_BLOCK // 2  # room for one block, not two
    with heap.reusing_freed_pages(limit=limit):
        s0 = _stats()
        arrays = [np.ones(heap.MIN_BLOCK // 8, dtype=np.int64) for _ in range(3)]
        del arrays
        s1 = _stats()
        assert s1["kept_bytes"] <= limit and s1["kept_blocks"] == 1
        assert s1["dropped"] == s0["dropped"] + 2  # the two that did not fit were unmapped
        heap.trim()
        s2 = _stats()
        assert s2["kept_bytes"] == 0 and s2["kept_blocks"] == 0 and s2["loads"] == 1


@needs_c
def test_handler_put_back_after_an_exception_and_arrays_outlive_it():
    assert get_handler_name() == "default_allocator"
    with pytest.raises(RuntimeError, match="inside"):
        with heap.reusing_freed_pages(limit=256 * MB):
            kept_alive = np.arange(BIG // 8, dtype=np.int64)
            raise RuntimeError("inside")
    assert get_handler_name() == "default_allocator"
    s = _stats()
    assert s["loads"] == 0 and s["kept_bytes"] == 0
    assert int(kept_alive[-1]) == BIG // 8 - 1  # made inside, still valid after
    assert get_handler_name(kept_alive) == "polyprof_reuse_freed_pages"
    dropped = s["dropped"]
    del kept_alive  # freed with no load running: unmapped, not kept
    assert _stats()["kept_bytes"] == 0 and _stats()["dropped"] == dropped + 1
    assert get_handler_name(np.zeros(BIG // 8)) == "default_allocator"


@needs_c
def test_other_threads_keep_numpys_handler():
    seen: list[str] = []
    inside, done = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait()
        seen.append(get_handler_name(np.ones(BIG // 8)))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with heap.reusing_freed_pages(limit=256 * MB):
        inside.set()
        done.wait(10)
    t.join()
    assert seen == ["default_allocator"]


def test_importing_the_module_imports_no_numpy():
    """The compiled handler is imported on first use: importing it imports NumPy, and
    every command imports this module at its start (the CLI, ``polyprof run``) before
    ``lowlevel/blas.py`` starts NumPy with one OpenBLAS thread and before the collector is
    paused for a summary."""
    code = ("import sys\nfrom polyprof.lowlevel import heap\nfrom polyprof import cli\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\nheap.trim()\n"
            "assert 'numpy' not in sys.modules, 'numpy imported by trim'\nprint(heap.IMPLEMENTATION)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == heap.IMPLEMENTATION


def test_inactive_and_pure_python_change_nothing():
    with heap.reusing_freed_pages(active=False):
        assert get_handler_name() == "default_allocator"
    code = ("from polyprof.lowlevel import heap; import numpy as np\n"
            f"from {get_handler_name.__module__} import get_handler_name\n"
            "assert heap.IMPLEMENTATION == 'python' and heap.reuse_stats() == {}\n"
            "with heap.reusing_freed_pages():\n"
            "    assert get_handler_name(np.zeros(1 << 21)) == 'default_allocator'\n"
            "heap.trim()\n")
    env = {**os.environ, "POLYPROF_PURE_PYTHON": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@needs_c
@pytest.mark.parametrize("path", sorted(KINETO_DIR.glob("*.json*")), ids=lambda p: p.name)
def test_every_shared_kineto_trace_is_the_same_through_the_handler(monkeypatch, path: Path):
    """Each shared trace read with every array of 16 KiB or more from the handler (so that
    these small traces' columns and temporaries go through it, reused, moved, trimmed)
    against the plain read: every event, stat, flow and counter column, planes, tracks,
    metadata."""
    plain = kineto.load(path)
    monkeypatch.setattr(heap, "MIN_BLOCK", 4 * 4096)
    monkeypatch.setattr(kineto, "LARGE_FILE", 0)
    s0 = _stats()
    reused = kineto.load(path)
    s1 = _stats()
    assert s1["fresh"] > s0["fresh"] and s1["loads"] == 0 and s1["kept_bytes"] == 0
    assert_same_trace(reused, plain)


@pytest.mark.parametrize("trim_bytes, mid_build", [(heap.TRIM_BYTES, 0), (8 * 1000, 2)])
def test_the_build_trims_mid_way_only_for_columns_of_trim_bytes(monkeypatch, trim_bytes: int, mid_build: int):
    """The V100 trace (45k events: int64 columns of 0.36 MB) trims the C heap once, at the
    build's end, under the default ``TRIM_BYTES``; counted as a load of that many
    bytes or more (a million events: 8 MB), it also trims after the slices' columns
    are freed and before the flows' sorts, which is what keeps that load's peak under
    200 B per event (docs/benchmarks.md). The same Trace either way."""
    from polyprof.formats.kineto import build, flows

    calls: list[str] = []
    path = KINETO_DIR / "v100_ns_resolution_rank0.json.gz"
    plain = kineto.load(path)
    for mod in (build, flows):
        monkeypatch.setattr(mod, "TRIM_BYTES", trim_bytes)
        monkeypatch.setattr(mod, "trim", lambda m=mod.__name__: calls.append(m))
    assert_same_trace(kineto.load(path), plain)
    assert len(calls) == 1 + mid_build and calls[-1].endswith("build")
    assert calls.count("polyprof.formats.kineto.flows") == mid_build // 2
