"""xz-compressed XSpace (``.xplane.pb.xz``) and Perfetto (``.pftrace.xz``) files read as
their plain files are, within the same inflation limits as gzip (``formats/safety.py``):
before, both were refused saying to decompress them."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main
from polyprof.errors import TraceFormatError
from polyprof.formats import safety
from polyprof.formats.detect import detect, why_not_a_trace

DATA = Path(__file__).parent / "data"
#: a real JAX training step on an H200 (XSpace) and Perfetto's own test trace (12 slices)
XSPACE = DATA / "h200" / "jax_train_step_h200.xplane.pb"
PFTRACE = DATA / "peers" / "perfetto" / "android_jank_cuj.pftrace"
#: a Perfetto trace of flows between two threads (polyprof's writer's peer: trace_builder)
PRODUCER = DATA / "peers" / "perfetto_trace_builder" / "producer_consumer.pftrace"


def _xz(src: Path, tmp_path: Path, data: bytes | None = None) -> Path:
    out = tmp_path / (src.name + ".xz")
    out.write_bytes(lzma.compress(src.read_bytes() if data is None else data))
    return out


def _same(a: polyprof.Trace, b: polyprof.Trace) -> None:
    assert a.n_events == b.n_events
    for k in ("start_ns", "dur_ns"):
        assert (a.events[k] == b.events[k]).all()
    assert a.names().tolist() == b.names().tolist()
    assert [p.name for p in a.planes] == [p.name for p in b.planes]
    assert (a.flows["src"] == b.flows["src"]).all() and (a.flows["dst"] == b.flows["dst"]).all()


def _summary(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["summary", str(path)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("src, fmt, events", [(XSPACE, "xspace", 358), (PFTRACE, "perfetto", 12),
                                              (PRODUCER, "perfetto", 144)])
def test_xz_file_reads_as_the_plain_one(src, fmt, events, tmp_path, capsys):
    packed = _xz(src, tmp_path)
    assert packed.read_bytes()[:6] == safety.XZ_MAGIC and detect(packed) == fmt
    assert why_not_a_trace(packed) == ""
    got, want = polyprof.load(packed), polyprof.load(src)
    assert got.n_events == events
    _same(got, want)
    assert _summary(packed, capsys) == _summary(src, capsys)


def test_xz_xspace_summary_numbers(tmp_path, capsys):
    out = _summary(_xz(XSPACE, tmp_path), capsys)
    assert "358 events on 5 plane(s)" in out and "matched by id 48" in out


def test_pftrace_in_two_xz_streams_with_padding(tmp_path):
    data = PRODUCER.read_bytes()
    cut = len(data) // 2  # anywhere: the streams' bytes are joined before packets are framed
    p = tmp_path / "two.pftrace.xz"
    p.write_bytes(lzma.compress(data[:cut]) + bytes(8) + lzma.compress(data[cut:]))
    _same(polyprof.load(p), polyprof.load(PRODUCER))


@pytest.mark.parametrize("src", [XSPACE, PRODUCER])
def test_damaged_xz_is_refused_naming_the_file(src, tmp_path):
    data = lzma.compress(src.read_bytes())
    for name, content, phrase in (("cut", data[: len(data) // 2], "truncated xz data"),
                                  ("corrupt", data[:400] + bytes(b ^ 0xFF for b in data[400:600]) + data[600:],
                                   "corrupt xz data")):
        p = tmp_path / f"{name}.{src.name}.xz"
        p.write_bytes(content)
        with pytest.raises(TraceFormatError) as ei:
            polyprof.load(p)
        assert str(ei.value).startswith(f"{p}: ") and phrase in str(ei.value), str(ei.value)


@pytest.mark.parametrize("src", [XSPACE, PRODUCER])
def test_an_xz_bomb_is_refused(src, tmp_path):
    # after the real trace, 8 MiB that its reader would read on: zeros (XSpace inflates the
    # whole file before parsing), empty packets (Perfetto frames packets as they come)
    filler = bytes(8 << 20) if src is XSPACE else b"\n\x00" * (4 << 20)
    p = _xz(src, tmp_path, src.read_bytes() + filler)
    assert p.stat().st_size < src.stat().st_size
    with safety.override(ratio_floor_bytes=1 << 20), pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    assert str(ei.value).startswith(f"{p}: ") and "xz data inflates more than 200x" in str(ei.value)


def test_xz_of_a_format_read_in_place_is_still_refused(tmp_path):
    p = tmp_path / "inner.parquet.xz"
    p.write_bytes(lzma.compress(b"PAR1" + bytes(4000) + b"PAR1"))
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    assert str(ei.value) == (f"{p}: xz-compressed: polyprof reads xz only of Chrome/Kineto JSON, Perfetto, "
                             "XSpace and nvprof/Nsight/rocpd/RPD databases, so decompress it first "
                             "(xz -dk inner.parquet.xz)")


def test_a_directory_of_xz_xspace_and_perfetto_files_is_read(tmp_path):
    from polyprof.ranks.sources import resolve  # a job's directory: how its files are listed

    _xz(XSPACE, tmp_path)
    _xz(PRODUCER, tmp_path)
    sources = resolve(tmp_path)
    assert [(s.label, s.load().n_events) for s in sources] == [("jax_train_step_h200.xplane.pb.xz", 358),
                                                                 ("producer_consumer.pftrace.xz", 144)]
