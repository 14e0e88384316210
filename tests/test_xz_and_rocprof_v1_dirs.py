"""xz-compressed Chrome/Kineto JSON read as gzip is (streamed, within the same inflation
limits: tb_plugin keeps its samples as ``.json.xz``), and a directory of rocprof (v1)'s
outputs read through its ``results.csv`` (gunrock's run, tests/data/peers/gunrock/)."""

from __future__ import annotations

import gzip
import lzma
import shutil
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import PolyprofError, TraceFormatError
from polyprof.formats import safety
from polyprof.formats.kineto.chunks import read_chunks
from polyprof.ranks.sources import resolve

PEERS = Path(__file__).parent / "data" / "peers"
RESNET = PEERS / "tb_plugin" / "resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.xz"
KINETO = Path(__file__).parent / "data" / "traces" / "kineto" / "a100_alexnet_small.json.gz"
GUNROCK = PEERS / "gunrock"


def _same(a: polyprof.Trace, b: polyprof.Trace) -> None:
    for k in ("start_ns", "dur_ns"):
        assert (a.events[k] == b.events[k]).all()
    assert a.names().tolist() == b.names().tolist() and a.categories().tolist() == b.categories().tolist()
    assert [p.name for p in a.planes] == [p.name for p in b.planes]
    assert (a.flows["src"] == b.flows["src"]).all() and (a.flows["dst"] == b.flows["dst"]).all()


def test_tb_plugins_xz_sample_reads_as_its_json(tmp_path):
    plain = tmp_path / "resnet50.json"
    plain.write_bytes(lzma.decompress(RESNET.read_bytes()))
    t = polyprof.load(RESNET)
    assert t.n_events == 57_506 and len(t.flows["src"]) == 9_096
    _same(t, polyprof.load(plain))


def test_xz_in_streams_with_padding_and_in_chunks(tmp_path):
    kin = gzip.decompress(KINETO.read_bytes())
    cut = kin.index(b"},", len(kin) // 2) + 1  # two xz streams, zeros between them as xz pads them
    p = tmp_path / "two.json.xz"
    p.write_bytes(lzma.compress(kin[:cut]) + bytes(8) + lzma.compress(kin[cut:]))
    whole = polyprof.load(KINETO)
    _same(polyprof.load(p), whole)
    rows: list = []
    read_chunks(p, lambda c: rows.append(len(c.input_row)), chunk_events=1000)
    assert sum(rows) == whole.n_events


def test_damaged_xz_is_refused_naming_the_file(tmp_path):
    data = lzma.compress(gzip.decompress(KINETO.read_bytes()))
    cases = {"cut.json.xz": (data[: len(data) // 2], "truncated xz data"),
             "corrupt.json.xz": (data[:60] + bytes(b ^ 0xFF for b in data[60:90]) + data[90:], "corrupt xz data"),
             "empty.json.xz": (lzma.compress(b" \n"), "empty file"),
             # (XSpace and Perfetto are read too: tests/test_xz_xspace_perfetto.py)
             "inner.parquet.xz": (lzma.compress(b"PAR1" + bytes(4000) + b"PAR1"),
                                  "xz-compressed: polyprof reads xz only of Chrome/Kineto JSON, Perfetto, XSpace "
                                  "and nvprof/Nsight/rocpd/RPD databases, so decompress it first "
                                  "(xz -dk inner.parquet.xz)")}
    for name, (content, phrase) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(TraceFormatError) as ei:
            polyprof.load(p)
        assert str(ei.value).startswith(f"{p}: ") and phrase in str(ei.value), str(ei.value)


def test_an_xz_bomb_is_refused_as_a_gzip_one(tmp_path):
    p = tmp_path / "bomb.json.xz"
    p.write_bytes(lzma.compress(b'{"traceEvents": [' + b" " * (8 << 20)))
    assert p.stat().st_size < 4096
    with safety.override(ratio_floor_bytes=1 << 20), pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    assert "xz data inflates more than 200x" in str(ei.value) and "decompression bomb" in str(ei.value)


def test_a_directory_of_xz_traces_is_read(tmp_path):
    shutil.copy(RESNET, tmp_path / "worker0.pt.trace.json.xz")
    (tmp_path / "notes.json.xz").write_bytes(lzma.compress(b'{"lr": 0.1}'))
    sources = resolve(tmp_path)
    assert [s.label for s in sources] == ["worker0.pt.trace.json.xz"]
    assert sources[0].load().n_events == 57_506


def test_a_directory_of_rocprof_v1_outputs_reads_its_results_csv(tmp_path):
    want = polyprof.load(GUNROCK / "results.csv")
    sources = resolve(GUNROCK)  # results.csv, results.stats.csv, LICENSE
    assert [s.label for s in sources] == ["results.csv"]
    got = sources[0].load()
    assert got.n_events == want.n_events == 56 and int(got.events["dur_ns"].sum()) == 9_025_354
    # the stats file alone (no kernel CSV beside it) is still no trace
    only = tmp_path / "stats"
    only.mkdir()
    shutil.copy(GUNROCK / "results.stats.csv", only / "results.stats.csv")
    with pytest.raises(PolyprofError, match="no trace files in this directory"):
        resolve(only)
    with pytest.raises(TraceFormatError, match="statistics"):
        polyprof.load(only / "results.stats.csv")


def test_a_rocprof_v1_csv_beside_its_runs_json_trace_is_not_a_second_rank(tmp_path):
    shutil.copy(GUNROCK / "results.csv", tmp_path / "results.csv")
    shutil.copy(GUNROCK / "results.csv", tmp_path / "run2.csv")
    (tmp_path / "results.json").write_text('{"traceEvents": [{"name": "hipLaunchKernel", "ph": "X", "ts": 1, '
                                           '"dur": 2, "pid": 1, "tid": 1}]}')
    assert sorted(s.label for s in resolve(tmp_path)) == ["results.json", "run2.csv"]


def test_summary_of_a_rocprof_v1_directory(capsys):
    from polyprof.cli import main  # the command, as a user runs it

    assert main(["summary", str(GUNROCK)]) == 0
    out = capsys.readouterr().out
    assert "56 events" in out and "/device:GPU:2" in out
