"""A program's own ``torch.profiler.profile(with_stack=True)``: its ``key_averages()``
self times under plain python and under ``polyprof run`` (issue 34, item 4). Runs
alternate (plain, polyprof, plain, ...), each a fresh process timed whole; each writes
its rows (count, self CPU time) to a JSON file. Prints, per pair, the ratio polyprof /
plain of the total self time, of the profiled loop's wall time and of the process's
wall time; their min and median, and those of one plain run over the next (the noise
of the machine, the tolerance to judge the first by); the median ratio of the rows with the most self time;
rows whose names or counts differ (none expected); and the load average.

    python bench/with_stack.py --steps 200 --repeat 7
    python bench/with_stack.py --steps 200 --repeat 15 --in-process

``--in-process``: one process alternates the program's profile plain and inside
``with polyprof.profile(output=...):`` (journal and sampler running), which takes the
differences between processes (heap layout, start-up) out of the comparison.
``--drop-in``: one process alternates ``torch.profiler.profile(with_stack=True)`` and the
drop-in ``polyprof.torch.profile(with_stack=True)`` (its session, clock markers and
export at each stop) around the same loop.

    python bench/with_stack.py --steps 200 --repeat 15 --drop-in
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("bench.with_stack")

#: the training step both programs profile
MODEL = r'''
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 8)

def step():
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
'''

PROGRAM = r'''
import json, sys, time
import torch
'''+MODEL+r'''
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True):
    step()  # warm-up: torch imports modules during its first profile
t0 = time.perf_counter()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
    for _ in range(int(sys.argv[1])):
        step()
loop_s = time.perf_counter() - t0
rows = {e.key: [e.count, e.self_cpu_time_total] for e in prof.key_averages()}
json.dump({"rows": rows, "loop_s": loop_s}, open(sys.argv[2], "w"))
'''


INPROC = r'''
import contextlib, json, sys, time
import torch
import polyprof
'''+MODEL+r'''
DROP_IN = sys.argv[5] == "drop-in"
if DROP_IN:
    import polyprof.torch

def measure(under=False):
    make = polyprof.torch.profile if under else torch.profiler.profile
    kw = {"output": sys.argv[3]} if under else {}
    t0 = time.perf_counter()
    with make(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True, **kw) as prof:
        for _ in range(int(sys.argv[1])):
            step()
    loop_s = time.perf_counter() - t0
    return {"rows": {e.key: [e.count, e.self_cpu_time_total] for e in prof.key_averages()}, "loop_s": loop_s}

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True):
    step()  # warm-up, its tables unread: torch's first profile can hold a name it cannot decode
measure()
if DROP_IN:
    measure(True)
out = []
for i in range(int(sys.argv[2])):
    pair = []
    for under in (False, True):
        if DROP_IN:
            pair.append(measure(under))
            continue
        with polyprof.profile(output=sys.argv[3]) if under else contextlib.nullcontext():
            pair.append(measure())
    out.append(pair)
json.dump({"pairs": out}, open(sys.argv[4], "w"))
'''


def run_once(cmd: list[str], out: Path, timeout: float) -> tuple[dict, float]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stderr[-2000:]}")
    return json.loads(out.read_text()), wall


def rows(m: dict) -> dict[str, list[float]]:
    """Rows by name without object addresses, without torch's dangling ``file(0):`` row."""
    return {re.sub(r" at 0x[0-9a-f]+", "", k): v for k, v in m["rows"].items() if "(0): " not in k}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--top", type=int, default=8, help="rows with the most self time to show")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--in-process", action="store_true", help="plain and polyprof.profile() in one process")
    ap.add_argument("--drop-in", action="store_true", help="torch.profiler.profile against polyprof.torch.profile")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        if args.in_process or args.drop_in:
            d = Path(tmp)
            (d / "inproc.py").write_text(INPROC)
            out = d / "pairs.json"
            done, _ = run_once([sys.executable, str(d / "inproc.py"), str(args.steps), str(args.repeat),
                                str(d / "t.polyprof"), str(out), "drop-in" if args.drop_in else "session"],
                               out, args.timeout)
            report([((a, 0.0), (b, 0.0)) for a, b in done["pairs"]], args.top)
            return
        d = Path(tmp)
        script = d / "train.py"
        script.write_text(PROGRAM)
        out = d / "rows.json"
        plain_cmd = [sys.executable, str(script), str(args.steps), str(out)]
        under_cmd = [sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(d / "t.polyprof"),
                     str(script), str(args.steps), str(out)]
        pairs: list[tuple[tuple[dict, float], tuple[dict, float]]] = []
        for _ in range(args.repeat):
            a = run_once(plain_cmd, out, args.timeout)
            b = run_once(under_cmd, out, args.timeout)
            pairs.append((a, b))
    report(pairs, args.top)


def report(pairs: list[tuple[tuple[dict, float], tuple[dict, float]]], top: int) -> None:
    for i, (a, b) in enumerate(pairs):
        log.info("pair %d: self %.0f / %.0f us, loop %.3f / %.3f s, process %.2f / %.2f s", i,
                 sum(v[1] for v in rows(a[0]).values()), sum(v[1] for v in rows(b[0]).values()),
                 a[0]["loop_s"], b[0]["loop_s"], a[1], b[1])
    ratios = {"total self time": [], "profiled loop": [], "whole process": []}
    per_row: dict[str, list[float]] = {}
    differ: set[str] = set()
    for (a, wa), (b, wb) in pairs:
        ra, rb = rows(a), rows(b)
        differ |= {k for k in set(ra) | set(rb) if k not in ra or k not in rb or ra[k][0] != rb[k][0]}
        ratios["total self time"].append(sum(v[1] for v in rb.values()) / sum(v[1] for v in ra.values()))
        ratios["profiled loop"].append(b["loop_s"] / a["loop_s"])
        if wa > 0:
            ratios["whole process"].append(wb / wa)
        for k in set(ra) & set(rb):
            if ra[k][1] > 0:
                per_row.setdefault(k, []).append(rb[k][1] / ra[k][1])
    for what, r in ratios.items():
        if not r:
            continue
        log.info("%-16s polyprof/plain: min %.3f  median %.3f  max %.3f", what, min(r), statistics.median(r), max(r))
    noise = [sum(v[1] for v in rows(b[0][0]).values()) / sum(v[1] for v in rows(a[0][0]).values())
             for a, b in zip(pairs, pairs[1:])]
    if noise:
        spread = [max(x, 1 / x) for x in noise]
        log.info("%-16s plain/next plain: min %.3f  median %.3f  max %.3f (spread: median %.3f, max %.3f)",
                 "total self time", min(noise), statistics.median(noise), max(noise), statistics.median(spread),
                 max(spread))
    heavy = sorted(rows(pairs[0][0][0]).items(), key=lambda kv: -kv[1][1])[:top]
    for k, v in heavy:
        r = per_row.get(k, [])
        if r:
            log.info("  %-60.60s %5d calls  median ratio %.3f (min %.3f, max %.3f)", k, v[0], statistics.median(r),
                     min(r), max(r))
    log.info("rows whose names or counts differ: %d %s", len(differ), sorted(differ)[:10])
    log.info("load average: %s", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
