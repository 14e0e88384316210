"""The Perfetto writer's compiled encoding (formats/_perfetto_wire.c) against its NumPy path.

Both must write the same bytes: every real trace in tests/data (and the H200 samples),
in chunks small enough that packets, annotations and flows straddle chunk boundaries,
and a generated trace with every stat value type at its extremes (negative and 64-bit
integers, NaN and infinite doubles, bools, texts new in each chunk), overlapping slices
(extra lanes) and counters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.formats import perfetto_wire as w
from polyprof.trace.builder import TraceBuilder
from polyprof.writers import perfetto

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb")) + \
    sorted(p for p in (ROOT / "tests/data/h200").iterdir() if p.suffix in (".gz", ".pb", ".polyprof"))

pytestmark = pytest.mark.skipif(w.IMPLEMENTATION != "c", reason="the _perfetto_wire extension is not built")


def _both(trace, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    compiled = b"".join(perfetto.packets(trace))
    with monkeypatch.context() as m:
        m.setattr(w, "_c", None)
        m.setattr(w, "IMPLEMENTATION", "numpy")
        plain = b"".join(perfetto.packets(trace))
    return compiled, plain


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_every_real_trace_is_written_to_the_same_bytes(path, monkeypatch):
    monkeypatch.setattr(perfetto, "CHUNK", 4096)  # several chunks: interned strings and flows across them
    compiled, plain = _both(polyprof.load(path), monkeypatch)
    assert compiled == plain and len(compiled) > 1000


def test_every_value_type_at_its_extremes(monkeypatch, tmp_path):
    rng = np.random.default_rng(35)
    b = TraceBuilder()
    p = b.plane("/host:CPU", "host", pid=1)
    tracks = [b.track(p, f"t{i}", "thread", i) for i in range(3)]
    n = 3000
    start = np.sort(rng.integers(0, 10**9, n))
    dur = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 10**6, n))
    ints = rng.integers(-(1 << 63), (1 << 63) - 1, n, dtype=np.int64)
    uints = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64)
    dbl = rng.standard_normal(n)
    dbl[::97] = np.nan
    dbl[::89] = np.inf
    b.events(rng.choice(tracks, n), [f"op{i % 40}" for i in range(n)], start, dur, "cpu_op",
             stats={"i": ints, "u": uints, "f": dbl, "b": rng.random(n) < 0.5,
                    "s": np.array([f"text {i % 700}" for i in range(n)], dtype=object),
                    "small": rng.integers(-3, 3, n).astype(np.int32)})
    rows = np.flatnonzero(rng.random(n) < 0.05)
    b.flows(rows[:-1], rows[1:], np.arange(len(rows) - 1))
    b.counter(p, "memory", np.sort(rng.integers(0, 10**9, 500)), rng.standard_normal(500))
    trace = b.build()
    monkeypatch.setattr(perfetto, "CHUNK", 1000)
    compiled, plain = _both(trace, monkeypatch)
    assert compiled == plain
    out = tmp_path / "t.pftrace"
    out.write_bytes(compiled)
    back = polyprof.load(out)  # and it reads back
    assert back.n_events == n
    assert sorted(back.stats["i"].values.tolist()) == sorted(ints.tolist())
    assert sorted(back.stats["u"].values.tolist()) == sorted(uints.tolist())
