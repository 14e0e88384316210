"""A tar archive of traces (plain, gzipped, xz-compressed) is refused saying to extract it
first, as bzip2, zstd and zip files get a line of their own, not "unrecognised format";
and the other compressions' line names what polyprof does read compressed (xz too)."""

from __future__ import annotations

import bz2
import io
import lzma
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError

DATA = Path(__file__).resolve().parent / "data"
MEMBERS = [DATA / "nsys" / "saxpy_2022.sqlite", DATA / "peers" / "gunrock" / "results.csv"]  # real traces
EXTRACT = "not a trace: extract it first (tar xf {name}) and give polyprof the trace files in it, or their directory"


def _tar(path: Path, mode: str, fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, mode, format=fmt) as t:
        for m in MEMBERS:
            t.add(m, arcname=f"traces/{m.name}")
    return path


def _problem(path: Path) -> str:
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(path)
    assert str(path) in str(e.value)
    return e.value.problem


@pytest.mark.parametrize(("name", "mode", "packed"), [
    ("traces.tar", "w", ""), ("traces.tar.gz", "w:gz", " (gzip-compressed)"),
    ("traces.tgz", "w:gz", " (gzip-compressed)"), ("traces.tar.xz", "w:xz", " (xz-compressed)")])
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT],
                         ids=["pax", "gnu", "ustar"])
def test_tar_archives_say_extract_first(tmp_path: Path, name: str, mode: str, packed: str, fmt: int) -> None:
    path = _tar(tmp_path / name, mode, fmt)
    assert _problem(path) == f"a tar archive{packed}, {EXTRACT.format(name=name)}"


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    path = _tar(tmp_path / "traces.tar.gz", "w:gz")
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"polyprof: error: {path}: a tar archive (gzip-compressed), {EXTRACT.format(name=path.name)}"]


def test_other_compressions_name_what_is_read(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(MEMBERS[1], arcname="results.csv")
    path = tmp_path / "traces.tar.bz2"
    path.write_bytes(bz2.compress(buf.getvalue()))
    assert _problem(path) == (
        "bzip2-compressed: polyprof reads plain files, gzipped ones and the xz-compressed ones of some formats "
        "(Chrome/Kineto JSON, Perfetto, XSpace, nvprof/Nsight/rocpd/RPD databases), so decompress it first "
        "(bunzip2 -k traces.tar.bz2)")


def test_a_json_trace_with_ustar_in_it_is_still_read(tmp_path: Path) -> None:
    """The tar check looks only at where tar's header keeps its magic, after no reader took
    the file: a trace whose text holds the word there is read as before."""
    head = b'{"traceEvents": [{"ph": "X", "name": "'
    body = head + b"x" * (257 - len(head)) + b'ustar", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
    assert body[257:262] == b"ustar"
    for path in (tmp_path / "t.json", tmp_path / "t.json.xz"):
        path.write_bytes(lzma.compress(body) if path.suffix == ".xz" else body)
        assert polyprof.load(path).n_events == 1


def test_a_zip_of_traces_says_what_it_holds_and_to_extract_it(tmp_path):
    """A zip of traces (not a .polyprof file) said "zip file without header.json: not a
    .polyprof trace"; it now names what it holds and says to extract it, as a tar does."""
    import zipfile

    path = tmp_path / "traces.zip"
    with zipfile.ZipFile(path, "w") as z:
        for m in MEMBERS:
            z.write(m, arcname=f"traces/{m.name}")
    problem = _problem(path)
    assert "a zip archive (holding traces/saxpy_2022.sqlite, traces/results.csv)" in problem, problem
    assert "extract it first (unzip traces.zip)" in problem, problem
