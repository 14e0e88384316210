"""What a trace says of the job and the machine it was recorded in survives each export:
the rank and process groups (``distributedInfo``: the collectives' bus bandwidth needs
each group's size), the host name, and the Kineto header torch writes (``trace_id``,
``record_shapes``, the CUDA driver, runtime and CUPTI versions).

Before: the Chrome export dropped ``distributedInfo`` and the rank, so the bus bandwidth
of a real gloo rank of a 300-rank job (``cpu_only_rank34``) halved on the round trip
(0.014789 -> 0.007419 GB/s, its algorithm bandwidth) and its rank read back None; the
Kineto and Perfetto exports lost the host name; the Kineto export of torch's own trace
dropped its header keys."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.collectives import collective_stats, collective_table
from polyprof.analyze.frames import column
from polyprof.ranks.result import anchor_of

DATA = Path(__file__).resolve().parent / "data"
RANK34 = DATA / "traces" / "kineto" / "cpu_only_rank34.json.gz"


def _export(src: Path, fmt: str, out: Path) -> Path:
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(src), "-f", fmt, "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def _busbw(trace: polyprof.Trace, rank: int) -> tuple[list[float], list[float]]:
    stats = collective_stats({rank: collective_table(trace)})
    return (np.asarray(column(stats, "algbw_gbps"), np.float64).tolist(),
            np.asarray(column(stats, "busbw_gbps"), np.float64).tolist())


@pytest.mark.parametrize("fmt, name", [("chrome", "x.json"), ("kineto", "x.json.gz"), ("perfetto", "x.pftrace")])
def test_an_export_keeps_the_rank_and_the_groups_bus_bandwidth(tmp_path: Path, fmt: str, name: str) -> None:
    before = polyprof.load(RANK34)
    assert [s.rank for s in before.sources] == [34]
    algbw, busbw = _busbw(before, 34)
    assert busbw and np.allclose(busbw, np.asarray(algbw) * 2 * 299 / 300)
    back = polyprof.load(_export(RANK34, fmt, tmp_path / name))
    assert [s.rank for s in back.sources] == [34]
    got_alg, got_bus = _busbw(back, 34)
    assert np.allclose(got_alg, algbw, rtol=1e-9) and np.allclose(got_bus, busbw, rtol=1e-9)


def test_the_chrome_export_writes_distributed_info_as_kineto_does(tmp_path: Path) -> None:
    """The same ``distributedInfo`` as the source, spaced as Kineto writes it (HTA finds a
    file's rank with a pattern that needs ``"rank": 34``)."""
    want = json.loads(gzip.decompress(RANK34.read_bytes()))["distributedInfo"]
    out = _export(RANK34, "chrome", tmp_path / "x.json")
    assert json.loads(out.read_text())["distributedInfo"] == want
    assert b'"rank": 34' in out.read_bytes()


def test_a_live_session_rank_goes_into_the_chrome_export(tmp_path: Path) -> None:
    """A session under torchrun (its source's rank, no distributedInfo) keeps its rank."""
    with polyprof.profile() as prof:
        with polyprof.section("work"):
            sum(range(1000))
    trace = prof.trace
    trace.sources[0].rank = 3
    path = tmp_path / "s.polyprof"
    trace.save(path)
    back = polyprof.load(_export(path, "chrome", tmp_path / "s.json"))
    assert [s.rank for s in back.sources] == [3]


@pytest.mark.parametrize("fmt, name", [("chrome", "x.json"), ("kineto", "x.json.gz"), ("perfetto", "x.pftrace"),
                                       ("xspace", "x.xplane.pb")])
def test_an_export_keeps_the_host_the_trace_was_recorded_on(tmp_path: Path, fmt: str, name: str) -> None:
    """Nsight Systems' ``Hostname`` (a real nsys database) comes back from every export:
    the Kineto export writes Kineto's top-level ``host_name``, the Perfetto export a
    ``host_name`` entry of its Chrome metadata; the readers take them back."""
    src = DATA / "nsys" / "saxpy_2022.sqlite"
    assert [s.host for s in polyprof.load(src).sources] == ["nid001608"]
    back = polyprof.load(_export(src, fmt, tmp_path / name))
    assert [s.host for s in back.sources] == ["nid001608"]


@pytest.mark.parametrize("fmt, name", [("kineto", "x.json.gz"), ("perfetto", "x.pftrace")])
def test_a_live_session_keeps_its_host(tmp_path: Path, fmt: str, name: str) -> None:
    with polyprof.profile() as prof:
        with polyprof.section("work"):
            sum(range(1000))
    path = tmp_path / "s.polyprof"
    prof.trace.save(path)
    host = polyprof.load(path).sources[0].host
    assert host
    assert [s.host for s in polyprof.load(_export(path, fmt, tmp_path / name)).sources] == [host]


def test_the_kineto_export_keeps_torchs_header(tmp_path: Path) -> None:
    """torch's own trace (an H200 run): its top-level keys stay at the top level, before
    the events, as torch wrote them."""
    src = DATA / "h200" / "torch_transformer_h200.json.gz"
    orig = json.loads(gzip.decompress(src.read_bytes()))
    header = ("trace_id", "record_shapes", "cuda_driver_version", "cuda_runtime_version", "cupti_version")
    assert all(k in orig for k in header)
    out = _export(src, "kineto", tmp_path / "k.json.gz")
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert {k: doc.get(k) for k in header} == {k: orig[k] for k in header}
    keys = list(doc)
    assert all(keys.index(k) < keys.index("traceEvents") for k in header)
    back = polyprof.load(out)
    assert {k: back.metadata.get(k) for k in header} == {k: orig[k] for k in header}


def test_a_re_export_does_not_carry_the_chrome_exports_own_keys(tmp_path: Path) -> None:
    """The Chrome export's ``otherData`` (its origin and wall anchor, for times counted
    from its own origin) is no header the Kineto export copies: the Kineto file of a
    Chrome export reads back with the original's wall times."""
    src = DATA / "corpus" / "seeds" / "kineto_converted.polyprof"
    chrome = _export(src, "chrome", tmp_path / "c.json")
    out = _export(chrome, "kineto", tmp_path / "k.json.gz")
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert "otherData" not in doc and "otherData" in json.loads(chrome.read_text())
    orig, back = polyprof.load(src), polyprof.load(out)
    assert np.array_equal(np.sort(orig.events["start_ns"]), np.sort(back.events["start_ns"]))
    for t in (orig, back):  # the same wall clock: no anchor of the Chrome file's origin
        anchor, _ = anchor_of(t)
        assert anchor is None or int(anchor["wall_ns"]) - int(anchor["mono_ns"]) == 0
