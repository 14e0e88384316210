"""Helpers for the capture tests: programs that serve captures, started and stopped
within a time limit, on loopback only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

#: a program that works in sections until STOP_FILE exists (at most LIMIT s), prints a
#: line and exits with code 3, so tests can check its output and exit code are its own
PROGRAM = r"""
import os, sys, time
import polyprof
stop, limit = sys.argv[1], float(sys.argv[2])
t_end = time.monotonic() + limit
n = 0
while time.monotonic() < t_end and not os.path.exists(stop):
    with polyprof.section("forward"):
        s = sum(i * i for i in range(5000))
    with polyprof.section("backward"):
        time.sleep(0.002)
    polyprof.step()
    n += 1
print(f"program done after {n} iterations", flush=True)
sys.exit(3)
"""

#: the same kind of loop in JAX, with JAX's own profiler server (TSL) instead of polyprof's
JAX_PROGRAM = r"""
import os, sys, time
import jax, jax.numpy as jnp
stop, port, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
jax.profiler.start_server(port)
x = jnp.ones((128, 128))
f = jax.jit(lambda a: jnp.tanh(a @ a).sum())
t_end = time.monotonic() + limit
while time.monotonic() < t_end and not os.path.exists(stop):
    f(x).block_until_ready()
print("jax program done", flush=True)
"""

#: XProf's own client, the call behind its "Capture profile" button (in a subprocess:
#: it is a C++ library that would take pytest down if it crashed)
XPROF_TRACE = r"""
import sys
from xprof.convert import _pywrap_profiler_plugin as p
p.trace(sys.argv[1], sys.argv[2], "", False, int(sys.argv[3]), 1, {})
"""

#: XProf's trace viewer conversion of a file: the names of its complete events
XPROF_VIEWER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "trace_viewer", {"use_saved_result": False})
names = sorted({e["name"] for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"})
print(json.dumps(names))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:port (or the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the program exited early ({proc.returncode}): {proc.communicate()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class Program:
    """A program run under ``polyprof run --serve`` (or any command) until ``stop()``."""

    def __init__(self, tmp: Path, cmd: list[str], port: int, env: dict[str, str] | None = None):
        self.stop_file = tmp / f"stop-{port}"
        self.port = port
        self.proc = subprocess.Popen([*cmd], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        wait_listening(port, self.proc)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout: float = 60.0) -> tuple[int, str, str]:
        self.stop_file.touch()
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"the program did not end within {timeout} s: {err[-2000:]}") from None
        return self.proc.returncode, out, err


def serving_program(tmp: Path, port: int, *, limit_s: float = 900, serve: str | None = None,
                    env: dict[str, str] | None = None, extra: list[str] | None = None) -> Program:
    script = tmp / "program.py"
    script.write_text(PROGRAM)
    stop = tmp / f"stop-{port}"
    cmd = [sys.executable, "-m", "polyprof", "run", *(extra or []), "--serve", serve or f"127.0.0.1:{port}",
           str(script), str(stop), str(limit_s)]
    return Program(tmp, cmd, port, env)


def polyprof_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


def run_python(code: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)


#: a program whose workers are processes (fork or spawn, as argv[1] says) until STOP_FILE
#: exists; its output is deterministic, so a served run can be compared with a plain one
POOL_PROGRAM = r"""
import multiprocessing as mp, os, sys, time
import polyprof

def work(i):
    with polyprof.section("child"):
        return sum(range(i * 1000))

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    stop, limit = sys.argv[2], float(sys.argv[3])
    t_end = time.monotonic() + limit
    rounds = 0
    while rounds < 2 or (time.monotonic() < t_end and not os.path.exists(stop)):
        with ctx.Pool(2) as pool, polyprof.section("map"):
            total = sum(pool.map(work, range(20)))
        rounds += 1
    print("total", total)
    print("error line", file=sys.stderr)
    sys.exit(5)
"""
