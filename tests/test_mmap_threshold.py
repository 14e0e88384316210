"""``heap.raise_mmap_threshold``: glibc's mmap threshold raised once per process, so a
small trace's column-sized arrays come from the heap and reuse its freed pages (each
checked in a fresh interpreter: the allocator's state is per process)."""

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
#: the raise the first is a mapping of its own, unmapped when freed (which only then raises
#: the threshold), so the second is fresh heap pages; with it, the first block's pages again
_CHILD = r"""
import resource, sys
import numpy as np
from polyprof.lowlevel import heap
if sys.argv[1] == "raised":
    heap.raise_mmap_threshold()
    heap.raise_mmap_threshold()  # once per process: a second call does nothing
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(1 << 16)  # 512 KiB, over glibc's initial 128 KiB threshold
del a
f0 = faults()
b = np.ones(1 << 16)
print(faults() - f0, heap._raised)
"""


def _child(mode: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], env=env, capture_output=True, text=True, check=True)
    faults, raised = out.stdout.split()
    return int(faults), raised


@glibc
def test_freed_column_pages_are_reused_once_raised():
    plain, plain_raised = _child("plain")
    raised, was_raised = _child("raised")
    assert (plain_raised, was_raised) == ("False", "True")
    # of its 128 pages, most fresh without it; none with it
    assert plain >= 64, plain
    assert raised < 8, raised


def test_an_xspace_load_raises_it(tmp_path):
    from polyprof.lowlevel import heap

    sample = Path(__file__).resolve().parent / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
    code = ("import polyprof; from polyprof.lowlevel import heap; assert not heap._raised; "
            f"t = polyprof.load({str(sample)!r}); print(heap._raised, t.n_events)")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC), capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["True", "26723"]
    assert heap.THRESHOLD_BLOCK < 32 << 20  # glibc raises the threshold only for blocks under 32 MiB
