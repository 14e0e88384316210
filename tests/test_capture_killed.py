"""A program killed during a capture: ``polyprof capture`` says so (audit: it said "no
profiler server answers at ...", though the server had answered and the process died
under the call). A connection that reached the server and ended under the call is told
apart from no server (capture/client.describe_rpc_error)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc")

from capture_helpers import Program, free_port  # noqa: E402
from polyprof.capture import client  # noqa: E402

LOOP = ("import time, polyprof\n"
        "while True:\n"
        "    with polyprof.section('tick'):\n"
        "        time.sleep(0.01)\n")


@pytest.mark.parametrize("after_s", [0.3, 1.5])
def test_a_program_killed_during_a_capture_is_said(tmp_path: Path, after_s: float) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    port = free_port()
    prog = Program(tmp_path, [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--serve",
                              f"127.0.0.1:{port}", str(script)], port)
    got: list[client.Captured] = []
    th = threading.Thread(target=lambda: got.extend(client.capture([prog.address], 5000)))
    try:
        th.start()
        time.sleep(after_s)  # the capture runs (the host plugin starts in milliseconds)
        os.kill(prog.proc.pid, signal.SIGKILL)
        th.join(60)
    finally:
        prog.proc.kill()
        prog.proc.communicate()
    assert got and not got[0].ok
    assert got[0].error.startswith(f"the program serving at {prog.address} ended or was killed during the "
                                   "capture, which is lost"), got[0].error  # before: "no profiler server answers"


def test_no_server_is_still_said_so() -> None:
    address = f"127.0.0.1:{free_port()}"
    got = client.capture([address], 100)[0]
    assert got.error.startswith(f"no profiler server answers at {address}"), got.error
