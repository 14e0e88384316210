"""torch's export_memory_timeline files (plot points and raw events), made by real torch
on the CPU, read as memory counters that match the file's own numbers."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from polyprof.formats.torch_memory_timeline import CATEGORIES

pytest.importorskip("torch")

SCRIPT = """
import sys, warnings
import torch
from torch.profiler import ProfilerActivity, profile
warnings.simplefilter("ignore")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
    for _ in range(2):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
prof.export_memory_timeline(sys.argv[1] + "/timeline.json", device="cpu")
prof.export_memory_timeline(sys.argv[1] + "/timeline.raw.json.gz", device="cpu")
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("timeline")
    subprocess.run([sys.executable, "-c", SCRIPT, str(d)], check=True, capture_output=True, timeout=300)
    return d


def _series(trace, name: str) -> tuple[np.ndarray, np.ndarray]:
    c = trace.counters
    sel = np.array([trace.strings[i] == name for i in c["name"].tolist()], bool)
    return c["ts_ns"][sel], c["value"][sel]


def test_plot_points_become_counters_per_category_and_their_sum(files):
    path = files / "timeline.json"
    assert detect(path) == "torch-memory-timeline"
    times, sizes = json.loads(path.read_text())
    sizes = np.asarray(sizes)[:, 1:]
    trace = polyprof.load(path)
    assert [p.name for p in trace.planes] == ["/host:CPU"]
    ts, total = _series(trace, "memory.allocated_bytes")
    assert ts.tolist() == [t * 1000 for t in times]
    assert total.tolist() == sizes.sum(axis=1).tolist()
    assert total.max() > 0
    for i, cat in enumerate(CATEGORIES):
        _, v = _series(trace, f"memory.{cat}_bytes")
        assert v.tolist() == (sizes[:, i].tolist() if sizes[:, i].any() else []), cat
    assert len(_series(trace, "memory.parameter_bytes")[1]) and len(_series(trace, "memory.optimizer_state_bytes")[1])


def test_raw_events_sum_to_the_same_levels(files):
    """The raw events, summed independently here, give the levels the plot points give."""
    raw_path, plot_path = files / "timeline.raw.json.gz", files / "timeline.json"
    assert detect(raw_path) == "torch-memory-timeline"
    raw = np.asarray(json.loads(gzip.decompress(raw_path.read_bytes())), np.int64)
    trace = polyprof.load(raw_path)
    ts, total = _series(trace, "memory.allocated_bytes")
    assert total[-1] == raw[:, 2].sum()
    assert total.max() == np.cumsum(raw[np.argsort(np.where(raw[:, 0] < 0, 0, raw[:, 0]), kind="stable"), 2]).max()
    _, plot_total = _series(polyprof.load(plot_path), "memory.allocated_bytes")
    assert total.max() == plot_total.max() and total[-1] == plot_total[-1]


def test_a_device_names_the_plane(files):
    trace = polyprof.load(files / "timeline.json", device="cuda:1")
    assert [(p.name, p.kind) for p in trace.planes] == [("/device:GPU:1", "device")]


def test_foreign_arrays_give_one_line(tmp_path):
    bad = tmp_path / "numbers.json"
    bad.write_text("[[1, 2, 3, 4], [5, 6, 7]]")  # shaped as raw events at first, then not
    assert detect(bad) == "torch-memory-timeline"
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(bad)
    assert str(bad) in str(e.value) and "not a torch memory timeline" in str(e.value) and "\n" not in str(e.value)
    bad.write_text("[[1, 9, 3, 0]]")
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(bad)
    assert "action outside 1-4" in str(e.value)
    chrome = tmp_path / "events.json"  # a Chrome JSON array still goes to the Chrome reader
    chrome.write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]')
    assert detect(chrome) == "chrome-json"


def test_a_programs_own_pairs_are_no_timeline(tmp_path):
    """A program's own JSON of (step, ns) pairs in a job's directory was taken for a memory
    timeline, and ``summary DIR`` failed on that "rank" ("rank 2 (slept.json): not a torch
    memory timeline"; an auditor): neither of torch's shapes, it is left out with the
    job's warning now, as other foreign JSON is."""
    from polyprof.formats.detect import why_not_a_trace

    pairs = tmp_path / "slept.json"
    pairs.write_text("[[4, 40152792], [6, 40140094]]")
    assert why_not_a_trace(pairs) != ""
    for shaped in ("[[1, 9, 3, 0]]", "[[-1, 1, 4096, null]]", "[[0.5, 1.5], [[0, 1, 2], [0, 3, 4]]]", "[[], []]"):
        pairs.write_text(shaped)
        assert detect(pairs) == "torch-memory-timeline", shaped
