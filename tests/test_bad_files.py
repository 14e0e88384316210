"""Files that are not traces: one clear error naming the file and the problem, of the
documented family (TraceFormatError < PolyprofError), through the API and through the
CLI (no traceback, exit code 1), whatever the reader."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import PolyprofError, TraceFormatError
from polyprof.formats import native

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto" / "a100_alexnet_small.json.gz"
TPU = ROOT / "tests" / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
#: jax.profiler.save_device_memory_profile's file (gzipped pprof), JAX 0.10.2 on the CPU
JAX_PPROF = ROOT / "tests" / "data" / "jax_cpu" / "device_memory.prof"
PPROF = "a pprof profile (sampled stacks or a memory snapshot), not a trace"
JAX_HINT = "JAX's device memory profile (the buffers live at one moment); a trace from jax.profiler.trace holds"


def _pb(field: int, value: int | bytes) -> bytes:
    """One protobuf field (a varint, or length-delimited bytes; values and sizes < 128)."""
    if isinstance(value, int):
        return bytes([field << 3, value])
    return bytes([field << 3 | 2, len(value)]) + value


def _cpu_pprof() -> bytes:
    """A pprof CPU profile as pprof's Profile message lays it out (sample_type 1, sample 2,
    location 4, function 5, string_table 6, period_type 11, period 12)."""
    strings = [b"", b"samples", b"count", b"cpu", b"nanoseconds", b"main", b"main.go"]
    return b"".join([_pb(1, _pb(1, 1) + _pb(2, 2)), _pb(1, _pb(1, 3) + _pb(2, 4)),
                     _pb(2, _pb(1, 1) + _pb(2, 7) + _pb(2, 70)), _pb(4, _pb(1, 1) + _pb(4, _pb(1, 1) + _pb(2, 12))),
                     _pb(5, _pb(1, 1) + _pb(2, 5) + _pb(4, 6)), *[_pb(6, s) for s in strings],
                     _pb(11, _pb(1, 3) + _pb(2, 4)), _pb(12, 100)])


def _native(tmp: Path) -> bytes:
    with polyprof.profile(plugins=["host"]) as s:
        with polyprof.section("x"):
            pass
    return native.save(s.trace, tmp / "ok.polyprof").read_bytes()


def _cases(tmp: Path) -> dict[str, tuple[bytes | None, str]]:
    """file name -> (content, None for a directory; a phrase the message must hold)."""
    rnd = random.Random(4)
    kin = KINETO.read_bytes()
    nat = _native(tmp)
    return {
        "cut.json.gz": (kin[: len(kin) // 2], "truncated gzip"),
        "garbage.json.gz": (kin[:20] + bytes(range(256)) * 4, "gzip"),
        "invalid.json": (b'{"traceEvents": [{"ph": "X",, "ts": 1}]}', "invalid JSON"),
        "not_a_trace.json": (b'{"a": 1}', "not a Chrome/Kineto trace"),
        "random.xplane.pb": (bytes(rnd.randrange(256) for _ in range(4096)), "not a valid XSpace"),
        "cut.xplane.pb": (TPU.read_bytes()[:400_000], "not a valid XSpace"),
        "empty.json": (b"", "empty file"),
        "empty.json.gz": (gzip.compress(b""), "empty file"),
        "blank.json": (b"  \n", "empty file"),
        "a_directory.json": (None, "is a directory, not a trace file (polyprof.load_ranks reads its traces"),
        "cut.polyprof": (nat[: len(nat) // 2], ".polyprof"),
        "corrupt.polyprof": (nat[:100] + bytes(500) + nat[600:], ".polyprof"),
        # xz is read for Chrome/Kineto JSON (tb_plugin keeps its samples so), Perfetto and
        # XSpace; xz of anything else (here: of gzip data) is refused, the message says how to decompress
        "sample.pt.trace.json.xz": (lzma.compress(kin[:2000]), "xz-compressed: polyprof reads xz only of Chrome/Kineto JSON, Perfetto, XSpace and nvprof/Nsight/rocpd/RPD databases, so decompress it first (xz -dk sample.pt.trace.json.xz)"),
        "sample.json.bz2": (bz2.compress(kin[:2000]), "bzip2-compressed: polyprof reads plain files, gzipped ones and the xz-compressed ones of some formats (Chrome/Kineto JSON, Perfetto, XSpace, nvprof/Nsight/rocpd/RPD databases), so decompress it first (bunzip2 -k sample.json.bz2)"),
        # a repository's trace kept in Git LFS and cloned without it (ROCm's roc-optiq sample)
        # a pprof profile: XSpace's sniff took it (both start with field 1), and its reader failed on it
        "device_memory.prof": (JAX_PPROF.read_bytes(), f"{PPROF}: {JAX_HINT}"),
        "device_memory_plain.prof": (gzip.decompress(JAX_PPROF.read_bytes()), f"{PPROF}: {JAX_HINT}"),
        "cpu.pb.gz": (gzip.compress(_cpu_pprof()), PPROF),
        "trace_70b.rpd": (b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"b4" * 32
                          + b"\nsize 137330688\n", "a Git LFS pointer, not the trace: the file of 137,330,688 bytes"),
    }


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    tmp = tmp_path_factory.mktemp("bad")
    out = {}
    for name, (data, phrase) in _cases(tmp).items():
        p = tmp / name
        if data is None:
            p.mkdir()
        else:
            p.write_bytes(data)
        out[name] = (p, phrase)
    out["missing.json"] = (tmp / "missing.json", "no such file")
    return out


NAMES = ["cut.json.gz", "garbage.json.gz", "invalid.json", "not_a_trace.json", "random.xplane.pb", "cut.xplane.pb", "empty.json",
         "empty.json.gz", "blank.json", "a_directory.json", "cut.polyprof", "corrupt.polyprof", "missing.json",
         "sample.pt.trace.json.xz", "sample.json.bz2", "device_memory.prof", "device_memory_plain.prof", "cpu.pb.gz"]


@pytest.mark.parametrize("name", NAMES)
def test_api_raises_one_trace_format_error(bad_files, name: str) -> None:
    path, phrase = bad_files[name]
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(path)
    assert isinstance(ei.value, PolyprofError)
    assert ei.value.path == str(path)
    assert str(ei.value).startswith(f"{path}: ") and phrase in ei.value.problem, str(ei.value)


@pytest.mark.parametrize("command", ["summary", "export", "report"])
@pytest.mark.parametrize("name", NAMES)
def test_cli_gives_one_line_no_traceback(bad_files, tmp_path: Path, name: str, command: str) -> None:
    path, phrase = bad_files[name]
    extra = {"summary": [], "export": ["-f", "xspace", "-o", str(tmp_path / "o.xplane.pb")],
             "report": ["-o", str(tmp_path / "r.html")]}[command]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-m", "polyprof", command, str(path), *extra], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    if name == "a_directory.json":  # every command reads a directory as the ranks of a job
        phrase = "no trace files in this directory"
    assert lines[0].startswith(f"polyprof: error: {path}: ") and phrase in lines[0]
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_pprof_profile_is_named_and_not_taken_for_a_trace(bad_files) -> None:
    from polyprof.formats.detect import why_not_a_trace

    for name in ("device_memory.prof", "device_memory_plain.prof", "cpu.pb.gz"):
        assert why_not_a_trace(bad_files[name][0]) == PPROF
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(bad_files["cpu.pb.gz"][0])
    assert ei.value.problem == PPROF  # no JAX hint for another program's profile
    assert why_not_a_trace(TPU) == "" and why_not_a_trace(KINETO) == ""


def test_the_head_of_a_gzip_file_is_what_gzip_reads(tmp_path, kineto_files):
    """detect's one-call head against gzip.open(...).read(n), which it falls back to."""
    import zlib

    from polyprof.formats.detect import _gunzip_head, _head

    data = b"".join(gzip.decompress(p.read_bytes()) for p in kineto_files[:3])
    cases = {"plain": gzip.compress(data), "short": gzip.compress(data[:100]),
             "fast": gzip.compress(data, compresslevel=1), "members": gzip.compress(data[:50]) + gzip.compress(data),
             "stored": gzip.compress(bytes(range(256)) * 40, compresslevel=0)}
    for name, blob in cases.items():
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(blob)
        with gzip.open(path, "rb") as g:
            want = b"GZ" + g.read(4096)
        assert _head(path) == want, name
    raw = gzip.compress(data)[:4096]
    assert _gunzip_head(raw, 4096) == zlib.decompressobj(31).decompress(raw, 4096)
    assert _gunzip_head(b"\x1f\x8b" + bytes(50), 4096) is None  # not gzip data: gzip words the error


def test_an_unrecognised_file_names_each_format_in_one_short_line(tmp_path: Path) -> None:
    """The refusal of a file of no known format names every format polyprof reads by its
    name, in a line a terminal shows whole (it was each format's summary: 1,300 characters)."""
    from polyprof.formats.registry import readers

    f = tmp_path / "r.h5"
    f.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(f)
    text = str(e.value)
    assert "r.h5" in text and "unrecognised format" in text
    assert all(fmt.name in text for fmt in readers()) and len(text) < 400, text


@pytest.mark.parametrize("magic, what", [(b"PK\x03\x04", "zip archive"), (b"PAR1", "Parquet file"),
                                         (b"SQLite format 3\x00", "SQLite database")])
def test_a_gzipped_file_of_a_format_read_in_place_says_to_decompress_it(tmp_path: Path, magic: bytes,
                                                                         what: str) -> None:
    """A .polyprof, Parquet or SQLite file gzipped (to share it) is named as such, with
    the command that undoes it, not "unrecognised format"."""
    f = tmp_path / "t.gz"
    f.write_bytes(gzip.compress(magic + bytes(range(256)) * 40))
    with pytest.raises(TraceFormatError, match=f"gzipped {what}.*gunzip -k t.gz"):
        polyprof.load(f)
