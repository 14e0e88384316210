"""Reading a Perfetto protobuf trace against reading the same trace as Kineto JSON.

    python bench/perfetto_read.py                  # the V100 trace, 5 pairs
    python bench/perfetto_read.py FILE --copies 4 --pairs 5
    python bench/perfetto_read.py --copies 2 --pairs 5 --against ../before/src

The trace (a Kineto JSON file) is exported by polyprof as ``.pftrace``; with ``--copies N``
both files hold it N times (the packets repeated; the JSON's events repeated). Each pair
runs ``polyprof.load`` of the JSON and of the ``.pftrace`` in fresh processes, alternating
which goes first, and records the load's wall time (imports not timed) and the child's
peak RSS (VmHWM, Linux). Prints each side's min and median, the ratio pftrace / JSON of both, the sizes
and the load average. ``--against SRC`` adds, in every round, the ``.pftrace`` load by
another tree's ``src`` (an earlier commit, extensions built in place), the three loads
in an order that rotates round by round, and prints that tree's ratios too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

_CHILD = r"""
import json, logging, sys, time
logging.disable(logging.CRITICAL)
import polyprof
t0 = time.perf_counter()
tr = polyprof.load(sys.argv[1])
s = time.perf_counter() - t0
# VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's RSS at the fork
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"s": s, "events": tr.n_events, "rss": hwm * 1024}))
"""


def run(path: Path, src: Path = ROOT / "src") -> tuple[float, int, int]:
    """(load seconds, events, peak RSS in bytes) of one fresh process importing ``src``."""
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                       env=child_env(str(src)), cwd="/")
    if r.returncode:
        raise SystemExit(f"{path}: {r.stderr[-2000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return got["s"], got["events"], got["rss"]


def make(src: Path, copies: int, tmp: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "src"))
    import polyprof
    from polyprof.writers import perfetto

    doc = json.loads(gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes())
    doc["traceEvents"] = doc["traceEvents"] * copies
    js = tmp / "trace.json"
    js.write_bytes(json.dumps(doc).encode())
    one = perfetto.write(polyprof.load(src), tmp / "one.pftrace").read_bytes()
    pf = tmp / "trace.pftrace"
    pf.write_bytes(one * copies)
    return js, pf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--against", type=Path, help="another tree's src: its .pftrace load in the same rounds")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} before")
    with tempfile.TemporaryDirectory() as d:
        js, pf = make(a.file, a.copies, Path(d))
        todo = [("json", js, ROOT / "src"), ("pftrace", pf, ROOT / "src")]
        if a.against:
            todo.append(("against", pf, a.against))
        res: dict[str, list[tuple[float, int, int]]] = {name: [] for name, _, _ in todo}
        for i in range(a.pairs):
            for name, path, src in todo[i % len(todo):] + todo[:i % len(todo)]:
                res[name].append(run(path, src))
        sizes = {"json": js.stat().st_size, "pftrace": pf.stat().st_size, "against": pf.stat().st_size}
    print(f"{a.file.name} x{a.copies}: {res['json'][0][1]:,} events (JSON), {res['pftrace'][0][1]:,} (pftrace)")
    for name, rows in res.items():
        t = [r[0] for r in rows]
        m = [r[2] / 2**20 for r in rows]
        print(f"  {name:8s} {sizes[name] / 1e6:8.1f} MB  load min {min(t):6.2f} s  median {statistics.median(t):6.2f} s"
              f"  peak RSS min {min(m):6.0f} MiB  median {statistics.median(m):6.0f} MiB")
    for name in [n for n in res if n != "json"]:
        t_ratio = [p[0] / j[0] for p, j in zip(res[name], res["json"])]
        m_ratio = [p[2] / j[2] for p, j in zip(res[name], res["json"])]
        label = "pftrace" if name == "pftrace" else f"pftrace ({a.against})"
        print(f"  {label} / JSON: time min {min(t_ratio):.2f} median {statistics.median(t_ratio):.2f}; "
              f"peak RSS min {min(m_ratio):.2f} median {statistics.median(m_ratio):.2f}")
    print(f"  load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
