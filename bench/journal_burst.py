"""The crash journal's promise under a burst: a program records sections as fast as
one thread can for BURST seconds, sleeps AFTER seconds and SIGKILLs itself; the
journal (OUTPUT.partial) must hold every section that ended more than 1 s before the
kill. Whole processes, several rounds; prints the rate reached, what was needed and
what the journal held, with the load average.

    PYTHONPATH=$PWD/src python bench/journal_burst.py --burst 3 --after 0.3 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_env import child_env  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"

#: sections in blocks of 1000; (count, time) noted after each block, so the parent
#: knows how many had ended by any moment
CHILD = r"""
import json, os, signal, sys, time
import polyprof
burst, after, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
marks = []
with polyprof.profile(["host"], output=out):
    sec, now = polyprof.section, time.perf_counter_ns
    t_end = now() + int(burst * 1e9)
    n = 0
    while True:
        for _ in range(1000):
            with sec("s"):
                pass
        n += 1000
        t = now()
        marks.append((n, t))
        if t >= t_end:
            break
    time.sleep(after)
    print(json.dumps({"marks": marks[::10] + [marks[-1]], "kill_ns": now()}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def one(src: str, burst: float, after: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "b.polyprof"
        p = subprocess.run([sys.executable, "-c", CHILD, str(burst), str(after), str(out)], env=child_env(src),
                           capture_output=True, text=True, timeout=600)
        info = json.loads(p.stdout.strip().splitlines()[-1])
        sys.path.insert(0, src)
        import polyprof

        t = polyprof.load(str(out) + ".partial")
        held = int((t.names() == "s").sum())
    deadline = info["kill_ns"] - 1_000_000_000
    needed = max((n for n, ts in info["marks"] if ts <= deadline), default=0)
    total = info["marks"][-1][0]
    return {"rate": total / burst, "total": total, "needed": needed, "held": held}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--burst", type=float, default=3.0)
    ap.add_argument("--after", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ok = True
    for i in range(a.rounds):
        r = one(str(SRC), a.burst, a.after)
        good = r["held"] >= r["needed"]
        ok &= good
        print(f"round {i + 1}: {r['rate'] / 1e6:.2f} M sections/s, {r['total']:,} recorded; ended > 1 s before "
              f"the kill: {r['needed']:,}; in the journal: {r['held']:,} {'ok' if good else 'MISSING'}")
    print(f"load average {os.getloadavg()[0]:.2f}; promise {'held' if ok else 'NOT held'} in every round")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
