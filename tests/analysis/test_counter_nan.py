"""A counter with NaN samples (a loss that diverged), and a torch loss given as it is
to ``polyprof.counter``: real host sessions, a real torch tensor that requires grad."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

import polyprof
from polyprof import analyze
from polyprof.errors import SessionError
from polyprof.analyze.table import Table
from polyprof.ranks.table_merge import merge_tables

NAN, INF = float("nan"), float("inf")


def _loss_trace(values: list[float]) -> polyprof.Trace:
    with polyprof.profile(plugins=["host"], options={"host": {"sample_interval_s": 0}}) as p:
        for v in values:
            polyprof.counter("loss", v)
    return p.trace


def _row(t: Table, name: str = "loss") -> dict:
    return next(r for r in t.to_dicts() if r["name"] == name)


def test_nan_samples_are_counted_apart_not_in_min_max_mean():
    r = _row(analyze.counter_stats(_loss_trace([1.0, 0.8, NAN, 0.6])))
    assert (r["samples"], r["nan_samples"]) == (4, 1)
    assert (r["min"], r["max"]) == (0.6, 1.0) and r["mean"] == pytest.approx(0.8)  # before: all NaN
    assert (r["first"], r["last"]) == (1.0, 0.6)


def test_all_nan_and_infinite_samples():
    t = analyze.counter_stats(_loss_trace([NAN, NAN]))
    r = _row(t)
    assert r["samples"] == r["nan_samples"] == 2 and all(math.isnan(r[c]) for c in ("min", "max", "mean"))
    assert t["nan_samples"].dtype == np.int64
    r = _row(analyze.counter_stats(_loss_trace([1.0, INF, NAN])))
    assert (r["min"], r["max"], r["mean"], r["nan_samples"]) == (1.0, INF, INF, 1)  # inf: a value
    empty = analyze.counter_stats(_loss_trace([]))
    assert "nan_samples" in empty.columns


def test_a_rank_sums_its_windows_nan_samples():
    a = analyze.counter_stats(_loss_trace([1.0, NAN]))
    b = analyze.counter_stats(_loss_trace([NAN, 0.5, NAN]))
    merged = merge_tables([{"counter_stats": a}, {"counter_stats": b}], (0, 1))["counter_stats"]
    r = _row(merged)
    assert (r["samples"], r["nan_samples"], r["min"], r["max"]) == (5, 3, 0.5, 1.0)


@pytest.mark.parametrize("fmt,name", [("chrome", "t.json"), ("kineto", "t.kineto.json")])
def test_json_exports_leave_non_finite_samples_out(tmp_path, fmt, name):
    """JSON has no NaN: orjson wrote null, which Perfetto skips and Chrome's viewer
    draws as 0; now the sample is left out (the Perfetto export keeps it)."""
    src = tmp_path / "run.polyprof"
    _loss_trace([1.0, NAN, INF, -INF, 0.5]).save(src)
    out = tmp_path / name
    from polyprof.cli import main

    assert main(["export", str(src), "-f", fmt, "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    loss = [e["args"]["loss"] for e in events if e.get("ph") == "C" and e.get("name") == "loss"]
    assert loss == [1.0, 0.5]  # before: [1.0, None, None, None, 0.5]
    pf = tmp_path / "t.pftrace"
    assert main(["export", str(src), "-f", "perfetto", "-o", str(pf)]) == 0
    back = polyprof.load(pf)
    sel = np.array([back.strings[i] == "loss" for i in back.counters["name"].tolist()], bool)
    assert np.array_equal(back.counters["value"][sel], [1.0, NAN, INF, -INF, 0.5], equal_nan=True)


def test_a_torch_loss_that_requires_grad_gives_no_warning():
    torch = pytest.importorskip("torch")
    w = torch.randn(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: UserWarning from collect/recorder.py
        with polyprof.profile(plugins=["host"]) as p:
            for i in range(3):
                loss = (w * i).sum()
                polyprof.counter("loss", loss)
                polyprof.counter("np", np.array(1.5))
                polyprof.counter("int", i)
    assert loss.requires_grad  # the program's tensor is left as it was
    t = analyze.counter_stats(p.trace)
    assert _row(t)["samples"] == 3 and _row(t)["last"] == pytest.approx(float(w.detach().sum()) * 2)
    assert _row(t, "np")["mean"] == 1.5 and _row(t, "int")["max"] == 2.0


def test_a_bad_value_adds_no_half_sample():
    """A value that is no number raises SessionError (naming the counter) to the program,
    and leaves nothing behind: the name and time are added only once the value is known."""
    with polyprof.profile(plugins=["host"], options={"host": {"sample_interval_s": 0}}) as p:
        polyprof.counter("a", 1.0)
        with pytest.raises(SessionError, match=r"polyprof.counter\('b'\)"):
            polyprof.counter("b", [1, 2])  # type: ignore[arg-type]
        polyprof.counter("a", 2.0)
    t = analyze.counter_stats(p.trace)
    assert t["name"].tolist() == ["a"] and t["last"].tolist() == [2.0]


def test_counter_never_imports_torch():
    code = ("import sys, polyprof\n"
            "with polyprof.profile(plugins=['host']):\n"
            "    polyprof.counter('a', 1); polyprof.counter('b', 2.5)\n"
            "print('torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "False", r.stderr
