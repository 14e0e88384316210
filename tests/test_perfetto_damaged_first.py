"""A Perfetto trace cut or damaged in its first packet is read as Perfetto and refused with
the reader's one line (the byte offset, what is wrong), as one cut later is, not called
"unrecognised format" (audit audM, finding 5). The sniff takes only traces whose first
packet is whole; detect.py then takes a file whose first packet's length runs past the
file, or one named as Perfetto's tools name traces that starts with a packet's tag."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect

PEER = Path(__file__).parent / "data" / "peers" / "perfetto" / "gpu_counters.pftrace"  # Perfetto's own test trace


def _error(p: Path) -> str:
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}: ") and "\n" not in msg
    return msg[len(f"{p}: "):]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


@pytest.mark.parametrize("cut", [22, 60])
@pytest.mark.parametrize("name", ["t.pftrace", "t.perfetto-trace", "t.bin"])
def test_a_trace_cut_in_its_first_packet(tmp_path: Path, cut: int, name: str) -> None:
    data = PEER.read_bytes()
    first = data[1]  # the first packet's length (one byte: 65)
    p = tmp_path / name
    p.write_bytes(data[:cut])
    assert detect(p) == "perfetto"  # before: unrecognised format
    assert _error(p) == (f"truncated Perfetto trace: the packet at byte 0 needs {first:,} bytes but the file "
                         f"ends after {cut - 2:,} of them (cut mid-packet)")


@pytest.mark.parametrize("name", ["t.pftrace.gz", "t.gz"])
def test_a_gzipped_trace_cut_in_its_first_packet(tmp_path: Path, name: str) -> None:
    p = tmp_path / name
    p.write_bytes(gzip.compress(PEER.read_bytes()[:60]))
    assert _error(p).startswith("truncated Perfetto trace: the packet at byte 0 needs 65 bytes")


def test_an_xz_trace_cut_in_its_first_packet(tmp_path: Path) -> None:
    p = tmp_path / "t.pftrace.xz"
    p.write_bytes(lzma.compress(PEER.read_bytes()[:60], lzma.FORMAT_XZ))
    assert _error(p).startswith("truncated Perfetto trace: the packet at byte 0 needs 65 bytes")


@pytest.mark.parametrize("name", ["t.pftrace", "t.bin"])
def test_a_first_packet_of_a_huge_length(tmp_path: Path, name: str) -> None:
    p = tmp_path / name
    p.write_bytes(b"\x0a" + _varint(1 << 62) + PEER.read_bytes()[2:200])
    assert _error(p) == "not a Perfetto trace at byte 0: a packet of 4,611,686,018,427,387,904 bytes"


def test_a_named_trace_damaged_after_its_first_packet(tmp_path: Path) -> None:
    data = bytearray(PEER.read_bytes())
    data[274] ^= 0x0A ^ 0x27  # the tag of a packet within the sniff's head
    p = tmp_path / "t.pftrace"
    p.write_bytes(bytes(data))
    assert _error(p) == ("not a Perfetto trace at byte 274: 0x27 where a TracePacket (field 1, length-delimited: "
                         "0x0a) must start")
    other = tmp_path / "t.bin"  # not named so, and its first packet whole: nothing says Perfetto
    other.write_bytes(bytes(data))
    assert "unrecognised format" in _error(other)


@pytest.mark.parametrize("data", [b"\nhello world\n", b"PK\x05\x06" + bytes(18), b"not a protobuf at all\n" * 4])
def test_other_bytes_are_not_taken_for_perfetto(tmp_path: Path, data: bytes) -> None:
    for name in ("t.pftrace", "t.bin"):
        p = tmp_path / name
        p.write_bytes(data)
        assert "unrecognised format" in _error(p)


def test_a_cut_xspace_named_so_is_still_xspaces(tmp_path: Path) -> None:
    xs = (Path(__file__).parent / "data" / "corpus" / "seeds" / "polyprof_written.xplane.pb").read_bytes()
    p = tmp_path / "t.xplane.pb"
    p.write_bytes(xs[:100])
    assert detect(p) == "xspace"


def test_a_named_trace_that_starts_with_an_empty_packet_is_said_damaged(tmp_path: Path) -> None:
    """A real Android trace starts with an empty packet (``0a 00``): a byte zeroed further
    on (419) was "unrecognised format" (audit audC, F1), where the same damage to another
    trace said where; the empty first packets are passed over."""
    android = PEER.with_name("android_jank_cuj.pftrace")
    data = bytearray(android.read_bytes())
    assert data[:2] == b"\x0a\x00"
    data[419] = 0
    bad = tmp_path / "android.pftrace"
    bad.write_bytes(bytes(data))
    assert _error(bad).startswith("not a Perfetto trace at byte 419: 0x00 where a TracePacket")
    unnamed = tmp_path / "android.bin"  # not named as Perfetto's: not taken as one by its first bytes alone
    unnamed.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="unrecognised format"):
        polyprof.load(unnamed)
