"""One benchmark child process timed as a user's command is: its wall time, its CPU time
(user + system, from ``os.wait4``: every thread it ran) and its peak RSS."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (bytes) of ``python argv``
    run from ``/`` with ``env``; its stderr's tail is the error where it fails."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         cwd="/")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    _, err = p.communicate()
    if status:
        raise SystemExit(err.decode()[-2000:])
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024
