"""Time ``polyprof.load`` of traces: MB/s of uncompressed JSON against msgspec's typed
decode of the same bytes (the floor), in-process repeats and fresh processes, optionally
against another checkout's ``src`` (before/after a change, measured in the same run);
and time and memory per event as a trace is replicated to millions of events.

    python bench/load.py                                  # the V100 Kineto trace, 7 runs
    python bench/load.py FILE... --repeat 7 --against /tmp/before/src
    python bench/load.py --big --replicate 4              # issue 35: every trace of 30 MB or more
    python bench/load.py --linear 22 220 1101             # 1M, 10M, 50M Trace events (V100 copies)

Each tree runs in children with ``PYTHONPATH=<tree>``, alternating between the trees:
"in-process" is ``--rounds`` children per tree, each loading the file ``--repeat`` times
after one warm-up load (all those loads pooled), each load paired with one typed decode
of the file's uncompressed bytes by msgspec (``kineto.events._DECODE_DOC_EVENTS``, the
structs the reader's Python path decodes; the bytes read and inflated untimed); "fresh"
is ``--repeat`` pairs of children per tree, one timing a load first, the other the
floor first (imports not timed): both cold, as the first big allocations of a process
cost it page faults the second one does not pay; their ratio is best / best and median
/ median, not per pair. Also timed: load +
decoding every stat (``len(trace.stats)``), which a deferred-stats reader leaves for
later. Best and median of each; the machine may be shared, so compare bests. ``.xz``
files (tb_plugin's samples) are inflated to plain JSON first; ``--replicate N`` adds the
first file repeated N times (bench/scaling.py's copies: times and ids moved along).

``--linear`` loads copies of the first file (default the V100) in fresh processes, one
per size and round, after loading a small trace (the reader's imports): seconds and µs
per Trace event against the smallest size, wall and CPU (the CPU time leaves out waiting
for the disk: 17 GB of plain JSON do not stay in the page cache; ``--gzip`` writes the
copies as ``.json.gz``, a tenth of it), and memory per event (peak RSS less the RSS
before the load, over the Trace's events; the peak is the process's VmHWM, as rusage's
maxrss of a child counts the parent's pages at the fork). ``--copies DIR`` keeps the
copies for the next run; with ``--against`` both trees load each size in turn, each round.
Also printed: user and system CPU per event and minor page faults (of the round with the
best CPU), as the system's share is what grows with the trace (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto"
DEFAULT = KINETO / "v100_ns_resolution_rank0.json.gz"
WARM = KINETO / "cpu_only_rank34.json.gz"  # a small trace loaded first by --linear's children
#: the shared Kineto traces of 30 MB or more of JSON (tb_plugin's 2021 samples and the H200
#: transformer's 30.6 MB, tests/data/h200; the V100 is 15 MB)
BIG = [*sorted((ROOT / "tests" / "data" / "peers" / "tb_plugin").glob("*.pt.trace.json.xz")),
       ROOT / "tests" / "data" / "h200" / "torch_transformer_h200.json.gz"]

_CHILD = r"""
import gzip, json, logging, sys, time
logging.disable(logging.CRITICAL)
import polyprof
from polyprof.formats.kineto.events import _DECODE_DOC_EVENTS
path, n, warm, floor_first = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
raw = gzip.open(path, "rb").read() if path.endswith(".gz") else open(path, "rb").read()
if warm:
    polyprof.load(path)
    _DECODE_DOC_EVENTS(raw)
def floor():
    t3 = time.perf_counter()
    doc = _DECODE_DOC_EVENTS(raw)
    return time.perf_counter() - t3
out = []
for _ in range(n):
    f = floor() if floor_first else None
    t0 = time.perf_counter()
    tr = polyprof.load(path)
    t1 = time.perf_counter()
    len(tr.stats)
    t2 = time.perf_counter()
    del tr
    out.append((t1 - t0, t2 - t0, f if floor_first else floor()))
print(json.dumps({"runs": out, "bytes": len(raw), "module": polyprof.__file__}))
"""

_LINEAR = r"""
import json, logging, resource, sys, time
logging.disable(logging.CRITICAL)
import polyprof
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
polyprof.load(sys.argv[2])  # the reader's lazy imports, untimed
before = rss()
r0 = resource.getrusage(resource.RUSAGE_SELF)
c0, t0 = time.process_time(), time.perf_counter()
tr = polyprof.load(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
r1 = resource.getrusage(resource.RUSAGE_SELF)
peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"load": t1 - t0, "cpu": c1 - c0, "events": tr.n_events, "before": before, "peak": peak,
                  "after": rss(), "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime,
                  "faults": r1.ru_minflt - r0.ru_minflt}))
"""

_TS = re.compile(rb'"ts": ?(\d+)(?:\.(\d{1,3}))?\b')
_IDS = re.compile(rb'"(id|correlation|External id)": ?(\d+)\b')


def _plain(src: Path, tmp: Path) -> Path:
    """``.xz`` -> plain JSON in ``tmp`` (polyprof reads gzip and plain JSON); others as they are."""
    if not src.name.endswith(".xz"):
        return src
    out = tmp / src.name[:-3]
    out.write_bytes(lzma.decompress(src.read_bytes()))
    return out


def replicate(src: Path, times: int, out_dir: Path, gz: bool = False) -> Path:
    """``src`` with its events repeated ``times`` times, written as plain JSON one copy at a
    time (as bench/scaling.py's copies: copy k moved by k spans, its flow, correlation and
    external ids by k times the largest; times keep three decimals); ``gz``: gzipped (ISA-L
    at level 1 where installed), as torch.profiler's ``.json.gz``."""
    raw = gzip.open(src, "rb").read() if src.name.endswith(".gz") else src.read_bytes()
    m = re.search(rb'"traceEvents"\s*:\s*\[', raw)
    end = re.compile(rb"}\s*\]\s*(,\s*\"|})").search(raw, m.end()) if m else None
    if not m or not end:
        raise SystemExit(f"{src}: no traceEvents array found")
    text = raw[m.end():end.start() + 1]
    marks = sorted([(x.start(), x.end(), 0, int(x.group(1)) * 1000 + int((x.group(2) or b"0").ljust(3, b"0")), b"ts")
                    for x in _TS.finditer(text)] +
                   [(x.start(), x.end(), 1, int(x.group(2)), x.group(1)) for x in _IDS.finditer(text)])
    lits, pos = [], 0
    for a, b, *_ in marks:
        lits.append(text[pos:a])
        pos = b
    tail = text[pos:]
    span = max(v for _, _, k, v, _ in marks if k == 0) - min(v for _, _, k, v, _ in marks if k == 0) + 1_000_000
    top = max([v for _, _, k, v, _ in marks if k == 1] or [0]) + 1
    out = out_dir / f"{src.name.split('.')[0]}_x{times}.json{'.gz' if gz else ''}"
    if out.exists():  # made by an earlier run (--copies): written whole, then renamed
        return out
    part = out.with_name(out.name + ".part")
    with _writer(part, gz) as f:
        f.write(raw[:m.end()])
        for k in range(times):
            parts = []
            for lit, (_, _, kind, v, name) in zip(lits, marks):
                parts.append(lit)
                if kind == 0:
                    v += k * span
                    parts.append(b'"ts": %d.%03d' % (v // 1000, v % 1000))
                else:
                    parts.append(b'"%s": %d' % (name, v + k * top))
            parts.append(tail)
            f.write((b",\n" if k else b"") + b"".join(parts))
        f.write(raw[end.start() + 1:])
    part.rename(out)
    return out


def _writer(path: Path, gz: bool) -> BinaryIO:
    if not gz:
        return open(path, "wb")
    try:
        from isal import igzip
    except ImportError:
        return gzip.open(path, "wb", compresslevel=1)
    return igzip.open(path, "wb", compresslevel=1)


def child(tree: str, path: Path, n: int, warm: bool, floor_first: bool = False) -> dict:
    env = child_env(tree)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(n), "1" if warm else "0",
                        "1" if floor_first else "0"],
                       capture_output=True, text=True, env=env, cwd="/")
    if r.returncode:
        raise SystemExit(f"{tree}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def report(path: Path, trees: dict[str, str], args: argparse.Namespace) -> None:
    inproc: dict[str, list] = {k: [] for k in trees}
    fresh: dict[str, list] = {k: [] for k in trees}
    size = 0
    for _ in range(args.rounds):
        for k, tree in trees.items():
            got = child(tree, path, args.repeat, warm=True)
            inproc[k] += got["runs"]
            size = got["bytes"]
    for _ in range(args.repeat):  # each fresh child times one load and one floor cold: two children
        for k, tree in trees.items():
            (load, full, _), = child(tree, path, 1, warm=False)["runs"]
            (_, _, floor), = child(tree, path, 1, warm=False, floor_first=True)["runs"]
            fresh[k].append((load, full, floor))
    mb = size / 1e6
    print(f"{path.name}: {mb:.1f} MB of JSON; best / median (s) of {args.rounds} x {args.repeat} in-process "
          f"loads, {args.repeat} fresh ones")
    print(f"  {'tree':<8} {'how':<11} {'load':>17} {'load + all stats':>19} {'MB/s':>13} "
          f"{'floor MB/s':>13} {'load / floor':>13}")
    for how, res in (("in-process", inproc), ("fresh", fresh)):
        for k in trees:
            load = [a for a, _, _ in res[k]]
            full = [b for _, b, _ in res[k]]
            floor = [c for _, _, c in res[k]]
            if how == "fresh":  # not paired: the load and the floor of different (cold) children
                ratio = [min(load) / min(floor), statistics.median(load) / statistics.median(floor)]
            else:
                ratio = [a / c for a, _, c in res[k]]
            print(f"  {k:<8} {how:<11} {min(load):>8.3f} {statistics.median(load):>8.3f} "
                  f"{min(full):>9.3f} {statistics.median(full):>9.3f} {mb / min(load):>6.0f} "
                  f"{mb / statistics.median(load):>6.0f} {mb / min(floor):>6.0f} {mb / statistics.median(floor):>6.0f} "
                  f"{min(ratio):>6.2f} {statistics.median(ratio):>6.2f}")
        if args.against:
            a = [x for x, _, _ in res["against"]]
            t = [x for x, _, _ in res["this"]]
            print(f"  {'':<8} {how:<11} load: this is {1 - min(t) / min(a):.1%} faster (best), "
                  f"{1 - statistics.median(t) / statistics.median(a):.1%} (median)")


def linear(src: Path, sizes: list[int], rounds: int, tmp: Path, gz: bool = False,
           trees: dict[str, str] | None = None) -> None:
    """Fresh loads of each copy, ``rounds`` times, alternating between ``trees`` (the
    checkout's ``src`` by default) within each size and round."""
    trees = trees or {"this": str(ROOT / "src")}
    files = {n: replicate(src, n, tmp, gz) for n in sorted(set(sizes))}
    warm = tmp / "warm.json"  # plain JSON, as the copies: the same readers' imports and sniffing
    warm.write_bytes(gzip.decompress(WARM.read_bytes()))
    res: dict[str, dict[int, list[dict]]] = {k: {n: [] for n in files} for k in trees}
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at the start")
    for _ in range(rounds):
        for n, path in files.items():
            for k, tree in trees.items():
                r = subprocess.run([sys.executable, "-c", _LINEAR, str(path), str(warm)], capture_output=True,
                                   text=True, env=child_env(tree), cwd="/", timeout=3600)
                if r.returncode:
                    raise SystemExit(f"{k} x{n}: {r.stderr[-2000:]}")
                res[k][n].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"{src.name} copied: load in fresh processes, {rounds} rounds; memory: peak RSS less RSS before the load")
    for k in trees:
        _linear_table(k, res[k], files)
    print(f"  load average {os.getloadavg()[0]:.1f} (1 min) at the end")


def _linear_table(tree: str, res: dict[int, list[dict]], files: dict[int, Path]) -> None:
    """One tree's rows: best wall and CPU per event against the smallest size's, user and
    system CPU per event and minor faults (of the round with the best CPU), memory."""
    first = min(res)
    base = min(r["load"] for r in res[first]) / res[first][0]["events"]
    cpu_base = min(r["cpu"] for r in res[first]) / res[first][0]["events"]
    print(f" {tree}:")
    for n, rs in res.items():
        ev = rs[0]["events"]
        best = min(r["load"] for r in rs)
        med = statistics.median(r["load"] for r in rs)
        b = min(rs, key=lambda r: r["cpu"])
        cpu = b["cpu"]
        mem = min(r["peak"] - r["before"] for r in rs)
        kept = min(r["after"] - r["before"] for r in rs)
        print(f"  x{n:<4} {ev:>10} events {files[n].stat().st_size / 1e9:6.2f} GB  load best {best:8.2f} s  median "
              f"{med:8.2f} s  {best / ev * 1e6:.3f} µs per event (x{first}: {best / ev / base:.2f})  CPU {cpu:8.2f} s "
              f"{cpu / ev * 1e6:.3f} µs per event (x{first}: {cpu / ev / cpu_base:.2f}; user {b['user'] / ev * 1e6:.3f}"
              f" + system {b['sys'] / ev * 1e6:.3f}, {b['faults'] / ev:.3f} faults per event)  "
              f"{mem / ev:.0f} B per event at the peak, {kept / ev:.0f} kept (peak RSS "
              f"{min(r['peak'] for r in rs) / 2**30:.2f} GiB)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="in-process children per tree (default 3)")
    ap.add_argument("--against", help="another checkout's src folder (e.g. the code before a change)")
    ap.add_argument("--big", action="store_true", help="every shared Kineto trace of 30 MB or more")
    ap.add_argument("--replicate", type=int, metavar="N", help="also the first file repeated N times")
    ap.add_argument("--linear", type=int, nargs="+", metavar="N", help="time and memory per event of N copies")
    ap.add_argument("--gzip", action="store_true", help="--linear: the copies gzipped (read as .json.gz)")
    ap.add_argument("--copies", type=Path, metavar="DIR",
                    help="--linear: write the copies in DIR and keep them; copies already there are reused")
    args = ap.parse_args()
    files = [f.resolve() for f in args.files] + (BIG if args.big else [])
    files = files or [DEFAULT]
    trees = {"this": str(ROOT / "src")}
    if args.against:
        trees = {"against": str(Path(args.against).resolve()), **trees}
    with tempfile.TemporaryDirectory(prefix="polyprof-load-") as t:
        tmp = Path(t)
        if args.linear:
            if args.copies:
                args.copies.mkdir(parents=True, exist_ok=True)
            linear(files[0], args.linear, args.rounds, args.copies or tmp, args.gzip, trees)
            return 0
        paths = [_plain(f, tmp) for f in files]
        if args.replicate:
            paths.append(replicate(paths[0], args.replicate, tmp))
        for path in paths:
            report(path, trees, args)
    for k, tree in trees.items():
        print(f"  {k}: {tree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
