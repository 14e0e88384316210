"""Peak memory of a long torch run: plain python, `polyprof run`, and `polyprof run
--schedule` (only a few steps recorded). Runs alternate; each is a fresh process whose
peak RSS comes from wait4. ``--unmodified``: the script has no polyprof call at all
(steps are its optimizer's, detected), as issue 34's 1,000-step script.

    python bench/schedule.py --steps 3000 --repeat 2
    python bench/schedule.py --steps 1000 --repeat 2 --unmodified --schedule wait=1,warmup=1,active=3
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("bench.schedule")

SCRIPT = '''
import sys
import torch
import polyprof

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
for i in range(int(sys.argv[1])):
    with polyprof.section("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with polyprof.section("backward"):
        loss.backward()
    opt.step()
    opt.zero_grad()
    polyprof.step()
'''

#: the same loop with no polyprof anywhere
UNMODIFIED = SCRIPT.replace("import polyprof\n", "").replace('    with polyprof.section("forward"):\n        loss',
                                                                  "    loss").replace(
    '    with polyprof.section("backward"):\n        loss.backward()', "    loss.backward()").replace(
    "    polyprof.step()\n", "")


def measure(cmd: list[str], timeout: float) -> tuple[float, float]:
    """(peak RSS in MB, wall s) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            raise TimeoutError(f"{cmd} ran over {timeout} s")
        time.sleep(0.05)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd} failed ({status})")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--schedule", default="wait=1,warmup=1,active=5,repeat=1")
    ap.add_argument("--unmodified", action="store_true", help="a script with no polyprof call")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "train.py"
        script.write_text(UNMODIFIED if a.unmodified else SCRIPT)
        assert not a.unmodified or "polyprof" not in UNMODIFIED
        out = str(Path(d) / "t.polyprof")
        runs = {
            "python": [sys.executable, str(script), str(a.steps)],
            "polyprof run": [sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", out, str(script),
                             str(a.steps)],
            f"polyprof run --schedule {a.schedule}": [sys.executable, "-m", "polyprof", "run", "--no-summary",
                                                      "-o", out, "--schedule", a.schedule, str(script),
                                                      str(a.steps)],
        }
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
        for i in range(a.repeat):
            for name, cmd in runs.items():  # alternating
                got[name].append(measure(cmd, a.timeout))
                log.info("run %d %-50s %7.0f MB %6.1f s", i, name, *got[name][-1])
    log.info("%d steps, %d runs each; load %s", a.steps, a.repeat, os.getloadavg())
    for name, vals in got.items():
        mem = [m for m, _ in vals]
        log.info("%-52s peak RSS min %6.0f MB median %6.0f MB; wall median %.1f s", name, min(mem),
                 statistics.median(mem), statistics.median([w for _, w in vals]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
