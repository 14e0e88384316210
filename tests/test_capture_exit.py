"""A program that ends during a capture: the capture ends at once and is answered with
what it recorded, and the program's exit waits for that answer at most the server's
exit grace (``Limits.exit_grace_s``, docs/capture.md).

Before: ``polyprof run --serve`` stopped the server with a 5 s grace, so a capture whose
stop and encoding took longer (a torch capture's stop; millions of host sections) was
cancelled and lost ("ended or was killed"); a program serving through
``POLYPROF_SERVE``/``polyprof.serve()`` stopped nothing, and python's end joined the
worker thread making the answer, however long it took (115 s measured). Here a plugin
whose stop takes SLOW_STOP_S stands for that cost, deterministically."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import polyprof
from capture_helpers import PROGRAM, free_port, polyprof_cli, wait_listening

grpc = pytest.importorskip("grpc")

SLOW_PLUGIN = r"""
import os, time
from polyprof.collect.plugin import Plugin
from polyprof.trace.builder import TraceBuilder

class SlowStop(Plugin):
    name = "slowstop"

    def _start(self, ctx):
        pass

    def _stop(self):
        time.sleep(float(os.environ["SLOW_STOP_S"]))

    def _collect(self):
        return TraceBuilder().build()
"""

#: the capture helpers' program, serving through polyprof.serve() with the slow plugin
SERVING = r"""
import sys
import polyprof
from slowstop import SlowStop
port, grace = int(sys.argv[3]), float(sys.argv[4])
polyprof.serve(port, plugins=["host", SlowStop()], exit_grace_s=grace)
""" + PROGRAM


def _start(tmp: Path, how: str, slow_s: float, grace_s: float) -> tuple[subprocess.Popen, int, Path]:
    (tmp / "slowstop.py").write_text(SLOW_PLUGIN)
    port = free_port()
    stop = tmp / f"stop-{port}"
    env = {**os.environ, "SLOW_STOP_S": str(slow_s), "PYTHONPATH": str(tmp)}
    if how == "run --serve":
        (tmp / "program.py").write_text(PROGRAM)
        cmd = [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--add-plugin", "slowstop:SlowStop",
               "--serve", f"127.0.0.1:{port}", "program.py", str(stop), "300"]
    else:
        (tmp / "program.py").write_text(SERVING)
        cmd = [sys.executable, "program.py", str(stop), "300", str(port), str(grace_s)]
    proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_listening(port, proc)
    return proc, port, stop


def _end_during_capture(tmp: Path, proc: subprocess.Popen, port: int, stop: Path,
                        out: Path) -> tuple[subprocess.CompletedProcess, float, int, str]:
    """Capture 60 s; once it records, let the program end. The capture's result, the
    seconds from the program's end to its exit, its exit code and stderr."""
    from polyprof.capture import profiler_service_pb2 as pb
    from polyprof.capture.protocol import stub

    box: dict[str, subprocess.CompletedProcess] = {}
    t = threading.Thread(target=lambda: box.update(cap=polyprof_cli("capture", f"127.0.0.1:{port}", "-d", "60000",
                                                                      "-o", str(out), timeout=200)))
    t.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            deadline = time.monotonic() + 120
            while "capturing" not in stub(ch, "Monitor")(pb.MonitorRequest(), timeout=30).data:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        time.sleep(1.0)
        stop.touch()
        ended = time.monotonic()
        try:
            _, err = proc.communicate(timeout=150)
        finally:
            took = time.monotonic() - ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        t.join(200)
    return box["cap"], took, proc.returncode, err


@pytest.mark.parametrize("how", ["run --serve", "serve() in the program"])
def test_a_capture_whose_stop_outlasts_5_s_is_answered_when_the_program_ends(tmp_path: Path, how: str) -> None:
    proc, port, stop = _start(tmp_path, how, slow_s=8.0, grace_s=30.0)
    out = tmp_path / "end.polyprof"
    cap, took, rc, err = _end_during_capture(tmp_path, proc, port, stop, out)
    assert rc == 3, err[-3000:]
    assert cap.returncode == 0, cap.stderr  # before (run --serve): "ended or was killed ... lost"
    assert took < 8.0 + 20, took  # the answer's time, not more
    trace = polyprof.load(out)
    names = trace.to_pandas()["name"]
    assert (names == "forward").sum() > 0
    # cut short, and said so: by the client and in the trace (before: "captured", no word)
    said = [w for w in trace.metadata["warnings"] if isinstance(w, dict) and w.get("plugin") == "capture"]
    assert len(said) == 1 and "of the 60 s asked: the program ended, or was stopped" in said[0]["message"], said
    assert f"warning: 127.0.0.1:{port}: the capture holds " in cap.stderr, cap.stderr


def test_the_exit_waits_for_an_answer_at_most_the_exit_grace(tmp_path: Path) -> None:
    """A stop of 40 s against an exit grace of 2 s: the program exits within seconds of
    its end (before: python's end joined the worker for the 40 s), and the client is told
    why the capture is lost."""
    proc, port, stop = _start(tmp_path, "serve() in the program", slow_s=40.0, grace_s=2.0)
    cap, took, rc, err = _end_during_capture(tmp_path, proc, port, stop, tmp_path / "lost.polyprof")
    assert rc == 3, err[-3000:]
    assert took < 2.0 + 15, took
    assert "Traceback" not in err, err[-3000:]
    assert cap.returncode == 1
    assert "answer was not ready within the time a program's end waits for it" in cap.stderr, cap.stderr
    assert not (tmp_path / "lost.polyprof").exists()


def test_the_server_pool_threads_hold_no_exit() -> None:
    from polyprof.capture.pool import DaemonPool

    pool = DaemonPool(2, "t-pool")
    try:
        futures = [pool.submit(lambda x: x * 2, i) for i in range(5)]
        assert [f.result(timeout=10) for f in futures] == [0, 2, 4, 6, 8]
        names = [t.name for t in threading.enumerate() if t.name.startswith("t-pool_")]
        assert 1 <= len(names) <= 2 and all(t.daemon for t in threading.enumerate() if t.name in names)
        boom = pool.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            boom.result(timeout=10)
    finally:
        pool.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        pool.submit(print)


def _h2_frame(typ: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", stream) + payload


def _h2_header(name: str, value: str) -> bytes:  # a literal header field, not indexed (RFC 7541 6.2.2)
    n, v = name.encode(), value.encode()
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def test_a_request_still_trickling_in_holds_the_stop_at_most_the_idle_grace() -> None:
    """No capture runs: a client whose Profile request is still arriving, a byte at a
    time, holds the program's end for IDLE_GRACE_S, not the exit grace (30 s) meant
    for a capture's answer."""
    from polyprof.capture import serve
    from polyprof.capture.server import IDLE_GRACE_S

    s = serve(0, plugins=["host"])
    headers = b"".join(_h2_header(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", "/tensorflow.ProfilerService/Profile"),
        (":authority", s.address), ("content-type", "application/grpc"), ("te", "trailers")))
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    try:
        conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2_frame(4, 0, 0, b"") + _h2_frame(1, 4, 1, headers)
                     + _h2_frame(0, 0, 1, b"\x00" + struct.pack(">I", 1000) + b"\x0a"))  # 1 of 1000 bytes
        time.sleep(1.0)  # the call is in flight
        t0 = time.monotonic()
        s.stop()
        took = time.monotonic() - t0
    finally:
        conn.close()
        s.stop(grace_s=0)
    assert took < IDLE_GRACE_S + 4, took  # before: the exit grace, 30 s
