"""Compressed Arrow buffers are bounded before they are inflated (formats/arrow_ipc.py).

Arrow IPC compresses each buffer on its own and prefixes it with its uncompressed
length; pyarrow allocates that length and inflates into it. The bombs here are real:
a zstd frame of RLE blocks (4 bytes per 128 KiB of output, ~32,000x) put in place of a
column's buffer in a file pyarrow wrote, with its true inflated length declared, so
pyarrow itself inflates it (checked at a small size below)."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats import arrow_ipc, safety
from polyprof.formats import journal_layout as j

SEEDS = Path(__file__).parent / "data" / "corpus" / "seeds"
BLOCK = 128 << 10


def zstd_bomb(inflated: int, size: int) -> bytes:
    """A zstd frame of exactly ``size`` bytes that inflates to ``inflated`` zero bytes
    (RLE blocks, then a skippable frame as padding)."""
    assert inflated % BLOCK == 0
    n = inflated // BLOCK
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic; no content size, no checksum; 128 KiB window
    for i in range(n):
        frame += ((BLOCK << 3) | (1 << 1) | (i == n - 1)).to_bytes(3, "little") + b"\x00"  # RLE block of 0s
    pad = size - len(frame) - 8
    assert pad >= 0, "buffer too small for this bomb"
    return bytes(frame) + b"\x50\x2a\x4d\x18" + struct.pack("<I", pad) + b"\x00" * pad


def _body_buffers(data: pa.Buffer) -> list[tuple[int, int]]:
    """(position in ``data``, length) of every buffer of the stream's record batches."""
    out = []
    reader = ipc.MessageReader.open_stream(pa.BufferReader(data))
    pos = 0
    for message in reader:
        if message.type == "record batch":
            body = message.body.to_pybytes()
            fb = arrow_ipc._Flat(message.metadata.to_pybytes())
            buffers = fb.ref(fb.ref(fb.root(), 2), 2)
            for b in fb.structs(buffers, 16):
                off, length = struct.unpack_from("<qq", fb.buf, b)
                if length > 8:
                    at = data.to_pybytes().index(body[off:off + length], pos)
                    out.append((at, length))
                    pos = at + length
    return out


def bomb_member(inflated: int, declared: int | None = None, table: pa.Table | None = None) -> bytes:
    """An Arrow IPC file (zstd) of ``table`` (default: one column of 20,000 random
    int64s) whose largest compressed buffer inflates to ``inflated`` bytes (declaring
    ``declared``, by default the truth)."""
    if table is None:
        table = pa.table({"v": np.random.default_rng(0).integers(0, 2**62, 20_000)})  # random: too big to shrink
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    data = bytearray(sink.getvalue())
    at, length = max(_body_buffers(pa.py_buffer(bytes(data))[8:]), key=lambda b: b[1])
    at += 8
    data[at:at + length] = struct.pack("<q", inflated if declared is None else declared) + zstd_bomb(inflated,
                                                                                                      length - 8)
    return bytes(data)


def bomb_polyprof(tmp: Path, inflated: int, declared: int | None = None) -> Path:
    """The real host_session.polyprof with its events.arrow's start_ns replaced by a bomb."""
    src = SEEDS / "host_session.polyprof"
    out = tmp / "bomb.polyprof"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, bomb_member(inflated, declared) if info.filename == "events.arrow"
                          else zin.read(info.filename))
    return out


def test_the_bomb_is_real_pyarrow_inflates_it():
    member = bomb_member(32 << 20)
    assert len(member) < 200_000
    table = ipc.open_file(pa.BufferReader(member)).read_all()  # what the reader did before: 32 MiB out of 160 KB
    assert table.column("v").chunk(0).buffers()[1].size == 32 << 20


@pytest.mark.parametrize("eos", [True, False])
def test_ipc_files_read_as_a_stream_with_or_without_the_end_marker(eos: bool):
    """The file is read as the stream inside it (not through its footer); a writer may
    leave out the end-of-stream marker before the footer, as pyarrow then reads it too."""
    table = pa.table({"a": np.arange(5000), "s": [str(i) for i in range(5000)]})
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="lz4")) as w:
        w.write_table(table.slice(0, 2000))
        w.write_table(table.slice(2000))
    data = sink.getvalue()
    (footer,) = struct.unpack_from("<i", data, len(data) - 10)
    at = len(data) - 10 - footer - 8
    assert data[at:at + 8] == b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the marker, where the format puts it
    if not eos:
        data = data[:at] + data[at + 8:]
        assert ipc.open_file(pa.BufferReader(data)).read_all().equals(table)
    infl = safety.Inflation("x.arrow", len(data))
    assert arrow_ipc.read_file(data, Path("x.arrow"), "x.arrow", infl).equals(table)
    assert infl.total >= 5000 * 8  # lz4 buffers counted before they were inflated


def test_a_stream_whose_first_message_is_not_a_schema_is_refused(tmp_path: Path):
    """pyarrow's read_schema crashes (SIGSEGV) on a message of unknown type: long-run
    .polyprof inputs 6126 and 8479 of seed 1 (in the corpus). The same for a journal."""
    data = bytearray((SEEDS / "killed.polyprof.partial").read_bytes())
    first = ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(bytes(data))[len(j.MAGIC):]))
    fb = arrow_ipc._Flat(first.read_next_message().metadata.to_pybytes())
    at = len(j.MAGIC) + 8 + fb.field(fb.root(), 1)  # after the continuation marker and the length
    assert data[at] == 1  # MessageHeader.Schema
    data[at] = 0x41
    p = tmp_path / "bad.polyprof.partial"
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="journal has no readable header.*type 'unknown', not a schema"):
        polyprof.load(p)


def test_a_compressed_arrow_buffer_is_bounded_before_it_is_inflated(tmp_path: Path):
    p = bomb_polyprof(tmp_path, 64 << 20)
    with safety.override(ratio_floor_bytes=1 << 20):
        with pytest.raises(TraceFormatError, match=r"the compressed Arrow data inflates more than "
                                                   r"200x .*decompression bomb") as e:
            polyprof.load(p)
    assert e.value.path == str(p)
    with safety.override(max_inflated_bytes=16 << 20):
        with pytest.raises(TraceFormatError, match="inflates to more than 16,777,216 bytes"):
            polyprof.load(p)


def test_a_declared_length_beyond_memory_is_refused_by_name(tmp_path: Path):
    p = bomb_polyprof(tmp_path, BLOCK, declared=2**62)  # pyarrow would try to allocate 4 EiB
    with pytest.raises(TraceFormatError, match="the compressed Arrow data inflates to more than"):
        polyprof.load(p)


def test_the_bound_is_for_all_members_together(tmp_path: Path):
    """Three stat members of 40 MiB each: each under the ratio's 64 MiB floor, together over."""
    src = SEEDS / "host_session.polyprof"
    out = tmp_path / "stats-bombs.polyprof"
    rng = np.random.default_rng(1)
    text = ["".join(map(chr, rng.integers(33, 127, 200))) for _ in range(30)]  # room for the bomb's frame
    stat = pa.table({"rows": np.arange(30), "values": pa.array(text, pa.string())})
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        header = json.loads(zin.read("header.json"))
        header["stats"] = [{"key": f"k{i}", "kind": "s", "entry": f"stats/{i}.arrow"} for i in range(3)]
        for name in ("events.arrow", "flows.arrow", "counters.arrow", "strings.arrow"):
            zout.writestr(name, zin.read(name))
        zout.writestr("header.json", json.dumps(header))
        for i in range(3):
            zout.writestr(f"stats/{i}.arrow", bomb_member(40 << 20, table=stat))
    with pytest.raises(TraceFormatError, match=r"the compressed Arrow data inflates more than 200x "
                                               r"\([\d,]+ compressed bytes, 83,\d{3},\d{3} so far\)"):  # at the 2nd
        polyprof.load(out)
    with safety.override(max_inflate_ratio=1e9):  # allowed, it loads: the bombs are valid stat columns
        assert set(polyprof.load(out).stats) == {"k0", "k1", "k2"}


_PEAK = """
import json, resource, sys
import polyprof
from polyprof.errors import TraceFormatError
try:
    polyprof.load(sys.argv[1])
    out = "loaded"
except TraceFormatError as e:
    out = str(e)
print(json.dumps({"error": out, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _peak(path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_4_gib_bomb_at_the_default_limits_keeps_memory_small(tmp_path: Path):
    p = bomb_polyprof(tmp_path, 4 << 30)
    assert p.stat().st_size < 300_000  # 4 GiB out of ~170 KB: ~25,000x
    r = _peak(p)
    assert "inflates more than 200x" in r["error"] and str(p) in r["error"], r
    baseline = _peak(SEEDS / "host_session.polyprof")
    assert baseline["error"] == "loaded"
    assert r["peak_mib"] < baseline["peak_mib"] + 64, (r, baseline)


def _journal(n_batches: int) -> bytes:
    """A journal: the magic, then an IPC stream of the journal's schema."""
    sink = io.BytesIO()
    sch = j.schema().with_metadata({"polyprof": json.dumps({"start_ns": 0, "pid": 7, "hostname": "h"})})
    with ipc.new_stream(sink, sch, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        for i in range(n_batches):
            w.write_batch(j.batch(j.MARK, 20_000, name=[f"m{i}"] * 20_000,
                                  start_ns=np.random.default_rng(i).integers(0, 2**40, 20_000),
                                  ident=[1] * 20_000))
    return j.MAGIC + sink.getvalue()


def test_a_journal_keeps_the_batches_before_a_bomb(tmp_path: Path):
    data = bytearray(_journal(2))
    stream = pa.py_buffer(bytes(data))[len(j.MAGIC):]
    start_ns = [b for b in _body_buffers(stream) if b[1] > 100_000]  # the random start_ns buffers
    assert len(start_ns) == 2
    at, length = start_ns[1]
    at += len(j.MAGIC)
    data[at:at + length] = struct.pack("<q", 1 << 30) + zstd_bomb(1 << 30, length - 8)  # the 2nd batch: 1 GiB
    p = tmp_path / "bomb.polyprof.partial"
    p.write_bytes(bytes(data))
    trace = polyprof.load(p)
    assert trace.n_events == 20_000  # the first batch's marks
    warning = " ".join(trace.metadata["warnings"])
    assert "batch 1 refused" in warning and "inflates more than 200x" in warning
    r, baseline = _peak(p), _peak(SEEDS / "killed.polyprof.partial")
    assert r["error"] == "loaded" and r["peak_mib"] < baseline["peak_mib"] + 64, (r, baseline)


def test_a_member_that_is_no_arrow_data_is_refused_before_it_is_read(tmp_path: Path, monkeypatch):
    """A .polyprof member that is not Arrow data (damaged, or made to be large) is told
    by its first bytes: never read whole first (1.1 GB of memory for a 1 GB member)."""
    from polyprof.formats import native

    src, out = SEEDS / "host_session.polyprof", tmp_path / "damaged.polyprof"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, b"\x00" * (8 << 20) if info.filename == "events.arrow"
                          else zin.read(info.filename))
    read: list[str] = []
    whole = native._read
    monkeypatch.setattr(native, "_read", lambda zf, name, path: (read.append(name), whole(zf, name, path))[1])
    with pytest.raises(TraceFormatError, match="events.arrow is not Arrow data"):
        polyprof.load(out)
    assert "events.arrow" not in read
