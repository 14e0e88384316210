"""MTIA's copies (``dma_request`` events, category ``mtia_ccp_events``) carry their size
and kind as ``args.size`` and ``args.direction`` (``HOST_TO_DEVICE``, ``DEVICE_TO_HOST``),
not Kineto's ``bytes`` and a kind in the name. Before, HTA's ``mtia_trace_single_rank``
showed one row ``MTIA:9 | unknown | 22361 | 0 B`` with no bandwidth; now one row per
direction with its bytes and bandwidth (the whole file: 7,360 DtoH copies of
4,272,997,120 B in 199.2 ms, 15,001 HtoD copies of 2,282,766,336 B in 226.2 ms).

The fixture is the file's first 300 ``dma_request`` events with its device's metadata
(tests/data/peers/README.md, ``hta_mtia/``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.copies import copies, copy_kind, per_copy

FILE = Path(__file__).parent / "data" / "peers" / "hta_mtia" / "mtia_rank_0_dma_requests.json.gz"


def _expected() -> dict[str, tuple[int, int, int]]:
    """(count, bytes, ns) per direction, read from the file with the standard library."""
    doc = json.loads(gzip.decompress(FILE.read_bytes()))
    out: dict[str, list[int]] = {}
    for e in doc["traceEvents"]:
        if e.get("name") == "dma_request":
            kind = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH"}[e["args"]["direction"]]
            c = out.setdefault(kind, [0, 0, 0])
            c[0] += 1
            c[1] += int(e["args"]["size"])
            c[2] += round(e["dur"] * 1000)
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def test_direction_words_name_the_kind():
    assert copy_kind("DEVICE_TO_HOST") == "DtoH"
    assert copy_kind("HOST_TO_DEVICE") == "HtoD"
    assert copy_kind("dma_request") == "unknown"


def test_mtia_copies_per_direction():
    """Per direction: count, bytes, time and achieved bandwidth exactly (before: one
    ``unknown`` row of 300 copies, 0 bytes, 300 unsized, no bandwidth)."""
    t = polyprof.load(FILE)
    want = _expected()
    assert want == {"HtoD": (202, 70_318_324, 4_417_264), "DtoH": (98, 140_196_460, 5_494_960)}
    tab = copies(t)
    got = {k: (c, b, ns, u, sn) for k, c, b, ns, u, sn in zip(
        tab["kind"].tolist(), tab["count"].tolist(), tab["total_bytes"].tolist(), tab["total_ns"].tolist(),
        tab["unsized"].tolist(), tab["sized_ns"].tolist())}
    assert got == {k: (c, b, ns, 0, ns) for k, (c, b, ns) in want.items()}
    assert set(tab["device"].tolist()) == {"/device:MTIA:9"}
    for k, bw in zip(tab["kind"].tolist(), tab["bandwidth_gbps"].tolist()):
        assert bw == want[k][1] / want[k][2]  # GB/s = bytes / ns
    assert tab["small"].tolist() == [72, 189] and tab["kind"].tolist() == ["DtoH", "HtoD"]
    # each copy's own bandwidth: its size over its duration
    c = per_copy(t)
    assert np.array_equal(c.gbps, c.size / c.dur) and not np.isnan(c.size).any()


def test_bytes_stat_wins_over_size(tmp_path):
    """A copy with Kineto's ``bytes`` and a kind in its name keeps them: ``size`` and
    ``direction`` only fill in what is missing."""
    ev = [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7,
           "ts": 10, "dur": 2, "args": {"bytes": 4096, "size": 1, "direction": "DEVICE_TO_HOST", "stream": 7,
                                        "device": 0}},
           {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "pid": 0, "tid": 7,
            "ts": 20, "dur": 2, "args": {"size": 2000, "direction": "DEVICE_TO_HOST", "stream": 7, "device": 0}}]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": ev}))
    tab = copies(polyprof.load(tmp_path / "t.json"))
    rows = sorted(zip(tab["kind"].tolist(), tab["count"].tolist(), tab["total_bytes"].tolist()))
    assert rows == [("DtoH", 1, 2000), ("HtoD", 1, 4096)]
