"""The decompression-bomb check counts the compressed bytes read across gzip members.

At the end of a member zlib leaves the rest of the input as both ``unused_data`` and
``unconsumed_tail``; subtracting both made the count go negative (clamped to 1), so a
multi-member gzip under the ratio was refused as a bomb and a real bomb's error said
"1 compressed bytes" (audit audM, finding 4)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats import safety
from polyprof.formats.inflate import Decompressed
from polyprof.formats.xspace import wire

SEEDS = Path(__file__).parent / "data" / "corpus" / "seeds"
#: a member inflating to more than one 16 MiB block, so a call stops inside it
_MEMBER = gzip.compress(bytes(20 << 20), 9)


def test_xspace_gunzip_counts_input_once_per_member(tmp_path: Path):
    data = gzip.compress(b"\x0a\x02\x12\x00") + _MEMBER + _MEMBER  # ~1000x each, under 2000x
    with safety.override(max_inflate_ratio=2000.0, ratio_floor_bytes=1 << 20):
        assert len(wire.gunzip(data, tmp_path / "x.xplane.pb.gz")) == 4 + (40 << 20)


def test_streamed_gunzip_counts_input_once_per_member(tmp_path: Path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b"[") + _MEMBER + _MEMBER)  # small: inflated by zlib, not ISA-L
    with safety.override(max_inflate_ratio=2000.0, ratio_floor_bytes=1 << 20):
        assert sum(len(b) for b in Decompressed(p, 1 << 24).blocks()) == 1 + (40 << 20)


def test_xspace_bomb_error_says_the_compressed_bytes_read(tmp_path: Path):
    head = gzip.compress((SEEDS / "polyprof_written.xplane.pb").read_bytes())
    bomb = tmp_path / "bomb.xplane.pb.gz"
    member = gzip.compress(b"\x0a\x00" * (10 << 20), 9)  # 20 MiB of empty planes
    bomb.write_bytes(head + member * 4)
    # the floor is crossed at the first member's end: what has been read is head + member
    with safety.override(ratio_floor_bytes=18 << 20):
        with pytest.raises(TraceFormatError) as ei:
            polyprof.load(bomb)
    msg = str(ei.value)
    assert msg.startswith(f"{bomb}: ") and "inflates more than 200x" in msg, msg
    m = re.search(r"\(([\d,]+) compressed bytes", msg)
    assert m and int(m.group(1).replace(",", "")) == len(head) + len(member), msg
