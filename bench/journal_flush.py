"""The crash journal's cost per section: JournalWriter flushes of N recorded sections
(one in ten with keyword stats), in fresh processes, this tree and another one
(``--before OLD/src``) alternating round by round; reports min and median time per
section, the file's size and the child's peak RSS.

    PYTHONPATH=$PWD/src python bench/journal_flush.py --sections 1000000 --rounds 5 --before OLD/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_env import child_env  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"

CHILD = r"""
import json, resource, sys, tempfile, threading, time
from pathlib import Path
from polyprof.collect import recorder as rec
from polyprof.collect.journal import JournalWriter
n = int(sys.argv[1])
r = rec.Recorder()
tid = threading.get_ident()
r.sections.extend((f"sec{i % 50}", i, i + 10, ({"k": i} if i % 10 == 0 else None), tid) for i in range(n))
path = Path(tempfile.mkdtemp(), "j.partial")
w = JournalWriter(path, {"pid": 1}, r, None, interval=3600)
t = time.perf_counter()
while w._pos["sections"] < n:
    w.flush()
took = time.perf_counter() - t
w.close(delete=False)
print(json.dumps({"ns_per_section": took / n * 1e9, "bytes": path.stat().st_size,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", help="another source tree measured in the same rounds")
    a = ap.parse_args()
    trees = {"this tree": str(SRC), **({"before": a.before} if a.before else {})}
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(a.rounds):
        for name, src in trees.items():
            p = subprocess.run([sys.executable, "-c", CHILD, str(a.sections)], env=child_env(src),
                               capture_output=True, text=True, timeout=600)
            if p.returncode:
                raise SystemExit(f"{name}: {p.stderr}")
            runs[name].append(json.loads(p.stdout))
    print(f"{a.sections} sections, {a.rounds} rounds alternating; load {os.getloadavg()[0]:.2f}")
    for name, rs in runs.items():
        ns = [r["ns_per_section"] for r in rs]
        print(f"{name:<10} {min(ns):7.0f} / {statistics.median(ns):7.0f} ns per section (min / median), "
              f"file {rs[0]['bytes'] / 1e6:.1f} MB, peak RSS {min(r['rss_mb'] for r in rs):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
