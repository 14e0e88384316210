"""Details of exported files that users trip over: a gzip header that named polyprof's
temporary file (``gunzip -N`` restored ``.polyprof-wxt_qy1o-o1.json``), an upper-case
``.JSON.GZ`` written as plain JSON, and a Parquet export that failed on metadata with an
int beyond 64 bits (which the native file keeps)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import polyprof

_PROGRAM = """
import polyprof
with polyprof.profile(output="t.polyprof", plugins=["host"]):
    with polyprof.section("work"):
        sum(range(1000))
"""


def _trace(tmp_path):
    subprocess.run([sys.executable, "-c", _PROGRAM], cwd=tmp_path, check=True, timeout=120)
    return polyprof.load(tmp_path / "t.polyprof")


def test_gzip_exports_name_no_file_and_upper_case_endings_are_gzipped(tmp_path):
    t = _trace(tmp_path)
    for name in ("t.json.gz", "T.JSON.GZ"):
        out = tmp_path / name
        p = subprocess.run([sys.executable, "-m", "polyprof", "export", str(tmp_path / "t.polyprof"), "-o", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        head = out.read_bytes()[:4]
        assert head[:2] == b"\x1f\x8b", (name, head)
        assert not head[3] & 0x08, f"{name}: the gzip header names a file"  # FNAME flag
        assert [e["name"] for e in json.loads(gzip.open(out).read())["traceEvents"] if e["name"] == "work"]
    assert t.n_events


def test_parquet_export_keeps_metadata_json_cannot_hold_as_is(tmp_path):
    t = _trace(tmp_path)
    t.metadata["odd"] = 2**70
    out = polyprof.export(t, tmp_path / "t.parquet")
    back = polyprof.load(out)
    assert float(back.metadata["odd"]) == float(2**70)
    assert back.n_events == t.n_events


def test_an_xplane_pb_gz_name_gets_a_gzipped_xspace_everywhere(tmp_path):
    """``.xplane.pb.gz``, which polyprof reads, was gzipped Chrome JSON from ``export``,
    polyprof's archive with a false warning from ``run -o``, and raw XSpace bytes under
    the gzip name from ``capture -o`` (an auditor)."""
    from polyprof.capture import output
    from polyprof.capture.client import Captured

    _trace(tmp_path)
    out = tmp_path / "e.xplane.pb.gz"
    p = subprocess.run([sys.executable, "-m", "polyprof", "export", str(tmp_path / "t.polyprof"), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "WARNING" not in p.stderr, p.stderr
    assert gzip.decompress(out.read_bytes())[:1] == b"\x0a"  # (an XSpace: its planes, field 1)
    assert polyprof.load(out).n_events > 0
    (tmp_path / "prog.py").write_text("import polyprof\nwith polyprof.section('work'):\n    sum(range(100))\n")
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "r.xplane.pb.gz", "prog.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "no writer" not in p.stderr, p.stderr
    assert gzip.decompress((tmp_path / "r.xplane.pb.gz").read_bytes())[:1] == b"\x0a"
    raw = (tmp_path / "e.raw.xplane.pb")
    raw.write_bytes(gzip.decompress(out.read_bytes()))
    c = Captured("127.0.0.1:9012", data=raw.read_bytes())
    written = output.write_one(c, tmp_path / "c.xplane.pb.gz", output.format_for(tmp_path / "c.xplane.pb.gz"))
    assert written and gzip.decompress((tmp_path / "c.xplane.pb.gz").read_bytes()) == raw.read_bytes()


def test_export_to_a_name_of_no_formats_ending_says_it_writes_chrome_json(tmp_path):
    _trace(tmp_path)
    p = subprocess.run([sys.executable, "-m", "polyprof", "export", str(tmp_path / "t.polyprof"), "-o",
                        str(tmp_path / "t.json.xz")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "no format polyprof writes ends so; writing Chrome JSON" in p.stderr, p.stderr
