"""``heap.prepare_heap``: glibc's mmap threshold raised and part of the heap marked for
transparent huge pages, once per process, so a small trace's column-sized arrays come
from the heap and reuse its pages (each checked in a fresh interpreter: the allocator's
state is per process)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds only")

#: minor faults of a 512 KiB array made, filled and freed, then made and filled again: without
#: the preparation the first is a mapping of its own, unmapped when freed (which only then
#: raises the threshold), so the second is fresh heap pages; with it, the first block's pages
#: again. Then the heap's mappings marked for huge pages (``hg`` in /proc/self/smaps) and their size.
_CHILD = r"""
import resource, sys
import numpy as np
from polyprof.lowlevel import heap
if sys.argv[1] == "prepared":
    heap.prepare_heap()
    heap.prepare_heap()  # once per process: a second call does nothing
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(1 << 16)  # 512 KiB, over glibc's initial 128 KiB threshold
del a
f0 = faults()
b = np.ones(1 << 16)
marked, size, lo = 0, 0, None
for line in open("/proc/self/smaps"):
    head = line.split()
    if "-" in head[0] and len(head) >= 5:
        lo, hi = (int(x, 16) for x in head[0].split("-"))
    elif head[0] == "VmFlags:" and "hg" in head[1:]:
        marked += 1
        size = max(size, hi - lo)
print(faults() - f0, heap._prepared, marked, size)
"""


def _child(mode: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


@glibc
def test_freed_column_pages_are_reused_once_prepared():
    plain = _child("plain")
    prepared = _child("prepared")
    assert (plain[1], prepared[1]) == ("False", "True")
    # of its 128 pages, most fresh without it; none with it
    assert int(plain[0]) >= 64, plain
    assert int(prepared[0]) < 8, prepared


@glibc
@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="a kernel without transparent huge pages")
def test_part_of_the_heap_is_marked_for_huge_pages():
    plain, prepared = _child("plain"), _child("prepared")
    assert int(prepared[2]) > int(plain[2])
    assert int(prepared[3]) >= 2 << 20  # whole 2 MiB pages of the 16 MiB made ready


def test_a_read_only_command_prepares_it_a_library_load_does_not():
    """The CLI's read-only commands own their process and prepare its heap; a reader
    called in someone else's process (a library user's, a profiled program's at a
    session's stop: plugins/jax.py loads the XSpace it wrote) leaves its allocator alone."""
    from polyprof.lowlevel import heap

    sample = Path(__file__).resolve().parent / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
    library = ("import polyprof; from polyprof.lowlevel import heap; "
               f"t = polyprof.load({str(sample)!r}); print(heap._prepared, t.n_events)")
    command = ("import contextlib, io, sys; from polyprof.cli import main; from polyprof.lowlevel import heap\n"
               f"with contextlib.redirect_stdout(io.StringIO()): rc = main(['summary', {str(sample)!r}])\n"
               "print(heap._prepared, rc)")
    env = dict(os.environ, PYTHONPATH=SRC)
    run = [subprocess.run([sys.executable, "-c", c], env=env, capture_output=True, text=True, check=True)
           for c in (library, command)]
    assert run[0].stdout.split() == ["False", "26723"]
    assert run[1].stdout.split()[-2:] == ["True", "0"]
    assert heap.HUGE_HEAP < heap.THRESHOLD_BLOCK < 32 << 20
