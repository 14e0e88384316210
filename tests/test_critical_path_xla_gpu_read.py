"""The critical path through a JAX read of a GPU buffer (``np.asarray`` of a
``jax.Array``, ``float(loss)``), on traces recorded on a real H200
(tests/data/h200/README.md): PjRt's read hands the transfer to a worker thread, which
runs it once the step's program has computed the buffer and launches the device-to-host
copy; a CUDA callback thread copies the data out of the staging buffer, and only then
does the reading thread return. The reading thread waits meanwhile in no event of its
own (``analyze/wait_links.py``, ``read_links``). Before, nothing linked the step's
device work to the read: each step's path was the host's (``np.asarray`` 11.1 of step
50's 15.2 ms, no kernel on it), though the device computed 11.4 ms of the 16 ms step.
Now the path runs launch -> the command buffer's kernels -> ``D2H Dispatch`` -> the
copy -> the copy out of the staging buffer -> the read's return, and the wait is off it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.depgraph_context import context
from polyprof.analyze.table import Table
from polyprof.analyze.window import AUTO, Window, view
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data" / "h200"
READ = "np.asarray(jax.Array)"


@pytest.fixture(scope="module")
def transformer() -> polyprof.Trace:
    return polyprof.load(DATA / "jax_transformer_h200.xplane.pb.gz")


def _per_step(cp: Table) -> dict[int, dict[str, np.ndarray]]:
    cols = {c: np.asarray(cp[c]) for c in cp.columns}
    return {int(s): {c: v[cols["step"] == s] for c, v in cols.items()} for s in np.unique(cols["step"])}


def test_the_reads_links_follow_the_transfer(transformer: polyprof.Trace) -> None:
    """Per read: the dispatch waits for the read's call and the program's last kernel,
    the copy out of the staging buffer for the device's copy; the reading thread waits
    from its read's call until then."""
    reads = context(transformer).wait_links.reads
    names = np.asarray(transformer.strings, object)[np.asarray(transformer.events["name"], np.int64)]
    kinds = transformer.kinds
    pairs = list(zip(names[reads.src].tolist(), names[reads.dst].tolist()))
    assert pairs.count(("CommonPjRtBuffer::ToLiteral", "D2H Dispatch")) == 200
    assert pairs.count(("MemcpyD2H", "D2H Copy From Staging Buffer")) == 199  # (not the first: below)
    from_kernel = reads.dst[kinds[reads.src] == Kind.KERNEL]
    assert len(from_kernel) == 199 and set(names[from_kernel].tolist()) == {"D2H Dispatch"}
    assert len(reads.src) == 598 and bool(reads.idle.all())  # (each a wait of an idle thread)
    assert len(reads.done) == 199 and set(names[reads.done].tolist()) == {"D2H Copy From Staging Buffer"}
    # the first read's copy ran on another worker thread than its dispatch (PjRt creating
    # its callback stream): it is not taken for its dispatch's, nor another read's copy
    disp = np.sort(transformer.rows_named("D2H Dispatch"))
    first = disp[np.argmin(np.asarray(transformer.events["start_ns"])[disp])]
    assert names[reads.src[reads.dst == first]].tolist() == ["CommonPjRtBuffer::ToLiteral"]


@pytest.mark.parametrize("steps", ["50:52", None])
def test_a_step_that_reads_its_loss_waits_for_its_kernels(transformer: polyprof.Trace, steps: str | None) -> None:
    """Steps 50 and 51 (the audit's), and every step of the default window: the
    kernels hold most of the path, the copy and its staging copy are on it, the read's
    call holds only its time after the data came back, and the path covers the step.
    Before: kernels 0 ms, ``np.asarray`` 11.1 and 10.9 ms of paths of 15.16 and
    16.03 ms; over the 199 steps 2.15 s of a 3.20 s path, kernels none."""
    trace = view(transformer, Window.parse(steps=steps) if steps else AUTO)
    per = _per_step(critical_path(trace))
    assert len(per) == (2 if steps else 199)
    for step, s in per.items():
        path, span = int(s["path_ns"][0]), int(s["span_ns"][0])
        on = s["on_path_ns"].astype(np.int64)
        kernel = int(on[s["kind"] == "kernel"].sum())
        assert kernel > 0.6 * path, (step, kernel, path)  # (11.4 ms of ~15-16 ms)
        assert path >= 0.97 * span, (step, path, span)
        # the read's call holds at most its time after the data came back (0.2-0.9 ms)
        read, staged = s["name"] == READ, s["name"] == "D2H Copy From Staging Buffer"
        after = int((s["start_ns"] + s["dur_ns"])[read][0] - (s["start_ns"] + s["dur_ns"])[staged][0])
        assert 0 < int(on[read].sum()) <= after < 0.1 * path, (step, int(on[read].sum()), after)
        copied = (s["kind"] == "memcpy") & (s["name"] == "MemcpyD2H")
        assert copied.sum() == 1 and int(s["slack_ns"][copied][0]) == 0, step
        for name in ("D2H Dispatch", "D2H Copy From Staging Buffer"):
            assert int(s["slack_ns"][s["name"] == name].min()) == 0, (step, name)


def test_a_device_get_waits_for_its_copy() -> None:
    """jax.device_get of 16 MiB (tests/data/h200/jax_copies_h200.xplane.pb): the copy
    (304 µs) and the copy out of the staging buffer (2.0-2.5 ms) are on each step's
    path, the read's wait is not (before: ``np.asarray`` 2.8-3.5 ms a step, the copies
    off the path)."""
    per = _per_step(critical_path(view(polyprof.load(DATA / "jax_copies_h200.xplane.pb"), AUTO)))
    assert len(per) == 3
    for step, s in per.items():
        on = s["on_path_ns"].astype(np.int64)
        assert int(on[s["name"] == READ].sum()) < 500_000, step
        staging = on[s["name"] == "D2H Copy From Staging Buffer"]
        assert len(staging) == 1 and int(staging[0]) > 1_900_000, step
        big = (s["kind"] == "memcpy") & (s["name"] == "MemcpyD2H") & (s["dur_ns"] > 250_000)
        assert big.sum() == 1 and int(s["slack_ns"][big][0]) == 0, step
