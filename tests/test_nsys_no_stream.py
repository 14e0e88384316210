"""Synchronisation records on no stream in an Nsight Systems export.

CUPTI gives a synchronisation that is on no stream (``cudaEventSynchronize``,
``cudaDeviceSynchronize``) the stream id 0xFFFFFFFF, "not applicable"; Kineto writes the
same records with ``"stream": -1``, which HTA leaves out of its breakdowns. The reader
takes that id for "no stream": such records are on the device's ``context`` line with
stream -1, in the Trace, the store and the Kineto export, and ``--window hta`` counts
only the device rows on a stream, as HTA does.

The file is a real export: ``tests/data/nsys/cloverleaf_2024.sqlite`` (nsys 2024.5.1,
CloverLeaf on an A100, from hpcgroup/pipit's test data, MIT: see README.md there), with
1,312 ``Event Synchronize`` records on stream 0xFFFFFFFF. Counts are recomputed by SQL on
the file; the breakdown's µs are HTA 0.5's on polyprof's Kineto export of it (run here
too when HTA is installed).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyprof.analyze.breakdown import ALL_STREAMS, temporal_breakdown
from polyprof.analyze.window import HTA
from polyprof.formats.detect import load
from polyprof.trace import keys
from polyprof.writers import kineto as kineto_writer

CLOVER = Path(__file__).resolve().parent / "data" / "nsys" / "cloverleaf_2024.sqlite"
NO_STREAM = 0xFFFFFFFF
#: HTA 0.5's temporal breakdown of polyprof's Kineto export of the file (µs)
HTA_US = {"idle": 40_189, "compute": 293_109, "non_compute": 9_109, "span": 342_407}

_HTA_DRIVER = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
r = TraceAnalysis(trace_dir=sys.argv[2]).get_temporal_breakdown(visualize=False).iloc[0].to_dict()
json.dump({k: float(v) for k, v in r.items()}, open(sys.argv[1], "w"))
"""


def _sql(query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{CLOVER}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300)


def test_syncs_on_no_stream_are_on_the_context_line() -> None:
    (n_sync,), = _sql(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE streamId = {NO_STREAM}")
    assert n_sync == 1312
    streams = sorted(s for (s,) in _sql("SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
                                        "SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
    t = load(CLOVER)
    strings = np.asarray(t.strings, dtype=object)
    sync = np.flatnonzero(strings[t.events["category"]] == "cuda_sync")
    assert len(sync) == n_sync
    tracks = {t.tracks[i].name: t.tracks[i].tid for i in np.unique(t.events["track"][sync]).tolist()}
    assert tracks == {"context": -1}
    rows, vals = t.stats[keys.STREAM].lookup(sync)
    assert len(rows) == n_sync and set(vals.tolist()) == {-1}
    (n_event,), = _sql(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE eventId != {NO_STREAM}")
    assert n_event == 0 and "event id" not in t.stats  # the same "not applicable" in eventId
    device_tracks = {tr.name for tr in t.tracks if t.planes[tr.plane].kind == "device"}
    assert device_tracks == {"context"} | {f"stream {s}" for s in streams}


def _hta_row(tb) -> dict[str, int]:
    """The all-streams row's times (µs), checked to be the one stream's."""
    assert list(tb["stream"]) == ["stream 7", ALL_STREAMS]
    rows = [{k: int(tb[f"{k}_ns"][i]) // 1000 for k in HTA_US} | {"activities": int(tb["activities"][i])}
            for i in range(2)]
    assert rows[0] == rows[1]
    return rows[1]


def test_window_hta_counts_the_streams_only() -> None:
    """No row for the syncs; HTA's percentages (the µs differ by HTA's rounding to whole
    µs, here of session times, in the export of times since its ``baseTimeNanoseconds``:
    docs/analysis.md)."""
    (n_work,), = _sql("SELECT (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL) + "
                      "(SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY)")
    row = _hta_row(temporal_breakdown(load(CLOVER), window=HTA))
    assert row["activities"] == n_work == 1591
    assert row["span"] == HTA_US["span"]
    for k in ("idle", "compute", "non_compute"):
        assert abs(row[k] - HTA_US[k]) / HTA_US["span"] < 1e-4, (k, row)


def test_kineto_export_writes_no_stream_as_kineto_does(tmp_path: Path) -> None:
    """``"stream": -1`` on the sync records; HTA on the export gives the numbers above."""
    out = tmp_path / "rank" / "rank0.json"
    out.parent.mkdir()
    kineto_writer.write(load(CLOVER), out)
    doc = json.loads(out.read_text())
    sync = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_sync"]
    assert len(sync) == 1312 and {e["args"]["stream"] for e in sync} == {-1}
    assert not any(e.get("args", {}).get("stream") == NO_STREAM for e in doc["traceEvents"])
    row = _hta_row(temporal_breakdown(load(out), window=HTA))  # polyprof's HTA window on the export
    assert row == HTA_US | {"activities": 1591}
    if importlib.util.find_spec("hta") is None:
        pytest.skip("Holistic Trace Analysis is not installed: the export's own check done")
    res = tmp_path / "hta.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _HTA_DRIVER, str(res), str(out.parent)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    h = json.loads(res.read_text())
    assert {k: h[f"{k}_time(us)"] for k in ("idle", "compute", "non_compute")} == \
        {k: HTA_US[k] for k in ("idle", "compute", "non_compute")}
    assert h["kernel_time(us)"] == HTA_US["span"]


def test_store_and_sql_put_syncs_on_the_context_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = _cli("convert", str(CLOVER), "-o", str(store))
    assert r.returncode == 0, r.stderr
    q = "SELECT track, count(*) n, min(stream) lo, max(stream) hi FROM events WHERE category = 'cuda_sync' GROUP BY 1"
    r = _cli("sql", "--csv", str(store), q)
    assert r.returncode == 0, r.stderr
    assert list(csv.DictReader(io.StringIO(r.stdout))) == [{"track": "context", "n": "1312", "lo": "-1", "hi": "-1"}]
