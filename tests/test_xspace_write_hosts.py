"""The host names an XSpace export writes: those the trace was recorded on (its sources'),
not the machine that converts it; this machine's only for a trace that names none."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from polyprof.formats.detect import load
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.merge import merge
from polyprof.writers import xspace as xspace_writer

DATA = Path(__file__).parent / "data"
SAXPY = DATA / "nsys" / "saxpy_2022.sqlite"  # TARGET_INFO_SYSTEM_ENV Hostname: nid001608


def test_tensorboard_export_names_the_recorded_host(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(SAXPY), "-f", "tensorboard",
                        "-o", str(tmp_path / "tb")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    files = list((tmp_path / "tb" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert [f.name for f in files] == ["nid001608.xplane.pb"]
    assert xspace_writer.pb().XSpace.FromString(files[0].read_bytes()).hostnames == ["nid001608"]


def test_plain_xspace_export_writes_the_host(tmp_path: Path) -> None:
    trace = load(SAXPY)
    assert [s.host for s in trace.sources] == ["nid001608"]
    assert list(xspace_writer.to_space(trace).hostnames) == ["nid001608"]
    back = load(xspace_writer.write(trace, tmp_path / "saxpy.xplane.pb"))
    assert [s.host for s in back.sources] == ["nid001608"]


def _one(host: str, pid: int = 1) -> TraceBuilder:
    b = TraceBuilder()
    p = b.plane(keys.HOST_PLANE, "host", pid=pid, source=b.source(host=host, pid=pid))
    b.event(b.track(p, "main", "thread", tid=1), "work", 1_000, 10, keys.CAT_SECTION)
    return b


def test_several_hosts_each_once_first_names_the_file(tmp_path: Path) -> None:
    a, b, c = (_one(h, pid).build() for h, pid in (("alpha", 1), ("beta", 1), ("alpha", 7)))
    trace = merge([a, b, c])
    assert xspace_writer.hostnames(trace) == ["alpha", "beta"]
    out = xspace_writer.write_logdir(trace, tmp_path, run="r")
    assert out.name == "alpha.xplane.pb"
    assert list(xspace_writer.pb().XSpace.FromString(out.read_bytes()).hostnames) == ["alpha", "beta"]


def test_no_recorded_host_falls_back_to_this_machine(tmp_path: Path) -> None:
    trace = _one("").build()
    assert xspace_writer.hostnames(trace) == []
    assert list(xspace_writer.to_space(trace).hostnames) == []
    out = xspace_writer.write_logdir(trace, tmp_path, run="r")
    local = socket.gethostname()
    assert out.stem == f"{local}.xplane" or not local
    assert list(xspace_writer.pb().XSpace.FromString(out.read_bytes()).hostnames) == [local]
    # an explicit host wins over the recorded one
    named = xspace_writer.write_logdir(_one("alpha").build(), tmp_path, run="s", host="other")
    assert named.name == "other.xplane.pb"
