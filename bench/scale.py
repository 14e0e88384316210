"""Issue 35's "linear to 50M events", whole-process: ``polyprof summary FILE`` as users run it.

Synthetic Kineto traces of N events are written first (:func:`write_trace`: per group one
``aten::mm`` cpu_op, its ``cudaLaunchKernel`` and the kernel it launched, linked by
correlation and external ids, 50 kernel names; a ``ProfilerStep#`` every 1,000 groups),
then each size is timed as one ``python -m polyprof summary FILE`` process per round,
rounds alternating the order of the sizes: CPU time (user + sys, by ``wait4``), wall,
peak RSS and page faults (major / minor, by GNU ``time``). A small trace of the same
program (``--base-events``, 30,000) gives the process's own floor (interpreter, NumPy,
imports): memory is printed both as peak RSS per event and as peak RSS less that
floor's per event; the verdict is read on the latter. The load average is printed
before and after.

Per size: the best and median round, µs of CPU (and of wall) per event, and the ratio of
each size's CPU per event to the smallest size's; then the two targets: time per event
at the largest size within 1.2x of the smallest's, and memory at most 200 B per event.
(bench/load.py ``--linear`` times the load alone, in-process; bench/scaling.py the
load and summary in-process with the imports left out: neither is this.)

    python bench/scale.py                                  # 1M and 5M, 2 rounds, plain JSON
    python bench/scale.py --big                            # and 20M (gzipped: ~1 GB)
    python bench/scale.py --sizes 1e6 5e6 2e7 --gzip --rounds 1 --dir /tmp/scale --keep
    python bench/scale.py --against /tmp/before/src        # another tree's src, same rounds

``--against SRC`` times that tree's ``polyprof summary`` in the same rounds (alternating
with this one) and prints its figures beside this tree's. Files are written to ``--dir``
(default a temporary directory, removed at the end unless ``--keep``); a file already
there with the size's name is reused. A 20M-event trace is 3.5 GB of JSON, ~1 GB gzipped;
the summary of it peaks near 5 GB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
#: targets of issue 35 ("linear to 50M events")
TIME_RATIO = 1.2
BYTES_PER_EVENT = 200

_HEADER = {
    "schemaVersion": 1, "displayTimeUnit": "ms", "baseTimeNanoseconds": 1790857026000000000,
    "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9,
                          "computeMinor": 0, "maxThreadsPerBlock": 1024, "numSms": 132, "warpSize": 32}],
}
_NAMES = ["k%d_gemm_sm90_%s" % (i, "x" * (i % 20)) for i in range(50)]
_STEP_EVERY = 1000
_EVENTS = re.compile(r"polyprof summary: (\d+) events")


def write_trace(out: IO[str], n: int) -> None:
    """About ``n`` events of a synthetic Kineto trace (n // 3 launch groups) to ``out``."""
    out.write(json.dumps(_HEADER)[:-1] + ', "traceEvents": [\n')
    ts = 5143939483270.0
    buf: list[str] = []
    for g in range(n // 3):
        if g % _STEP_EVERY == 0:
            buf.append('{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1143,"tid":1143,"ts":%.3f,'
                       '"dur":%.3f,"args":{"External id":%d}},\n' % (g // _STEP_EVERY, ts, _STEP_EVERY * 20.0 - 1, g))
        c = g + 10
        buf.append('{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1143,"tid":1143,"ts":%.3f,"dur":12.5,'
                   '"args":{"External id":%d}},\n' % (ts + 0.5, g))
        buf.append('{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1143,"tid":1143,"ts":%.3f,'
                   '"dur":5.0,"args":{"External id":%d,"cbid":211,"correlation":%d}},\n' % (ts + 2, g, c))
        buf.append('{"ph":"X","cat":"kernel","name":"%s","pid":0,"tid":7,"ts":%.3f,"dur":15.0,"args":{"External id":'
                   '%d,"device":0,"stream":7,"correlation":%d,"grid":[2,66,1],"block":[384,1,1]}},\n'
                   % (_NAMES[g % 50], ts + 8, g, c))
        ts += 20.0
        if len(buf) > 30000:
            out.write("".join(buf))
            buf = []
    out.write("".join(buf))
    out.write('{"name":"process_name","ph":"M","ts":%.3f,"pid":1143,"tid":0,"args":{"name":"python3"}}\n'
              '],"traceName":"synthetic"}\n' % ts)


def trace_file(directory: Path, n: int, gz: bool) -> Path:
    """The synthetic trace of ``n`` events in ``directory`` (written unless there)."""
    path = directory / f"synthetic_{n}.json{'.gz' if gz else ''}"
    if not path.exists():
        part = path.with_name(path.name + ".part")
        t0 = time.perf_counter()
        with (gzip.open(part, "wt", compresslevel=1) if gz else open(part, "w")) as f:
            write_trace(f, n)
        part.rename(path)
        print(f"  wrote {path.name}: {path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def measure(src: str, path: Path) -> dict[str, float]:
    """One ``python -m polyprof summary path`` process from the tree ``src``: CPU user and
    sys (``wait4`` on GNU time, which includes its child), wall, peak RSS (MiB) and page
    faults of the child (GNU time), and the trace's event count (the summary's first line)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        cmd = ["/usr/bin/time", "-f", "%M %F %R", "-o", out.name, sys.executable, "-m", "polyprof", "summary", str(path)]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=child_env(src), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = p.communicate()
        wall = time.perf_counter() - t0
        # (communicate reaped it: its rusage is RUSAGE_CHILDREN's growth, one child at a time)
        if p.returncode:
            raise RuntimeError(f"summary of {path.name} failed: {stderr[-1500:]}")
        rss_kb, major, minor = (int(v) for v in out.read().split()[-3:])
    m = _EVENTS.search(stdout)
    return {"wall": wall, "rss": rss_kb / 1024, "major": major, "minor": minor, "events": int(m.group(1)) if m else 0}


def timed(src: str, path: Path) -> dict[str, float]:
    """:func:`measure` with the child's user and sys CPU (this process's children's rusage,
    before and after: the child is the only one reaped in between)."""
    before = os.times()
    r = measure(src, path)
    after = os.times()
    r["user"] = after.children_user - before.children_user
    r["sys"] = after.children_system - before.children_system
    r["cpu"] = r["user"] + r["sys"]
    return r


def summarise(runs: list[dict[str, float]], base_rss: float) -> dict[str, float]:
    ev = runs[0]["events"]
    best = min(runs, key=lambda r: r["cpu"])
    rss = max(r["rss"] for r in runs)
    return {
        "events": ev, "cpu_best_s": best["cpu"], "cpu_median_s": statistics.median(r["cpu"] for r in runs),
        "user_s": best["user"], "sys_s": best["sys"], "wall_best_s": min(r["wall"] for r in runs),
        "wall_median_s": statistics.median(r["wall"] for r in runs),
        "us_per_event_cpu": best["cpu"] / ev * 1e6, "us_per_event_wall": min(r["wall"] for r in runs) / ev * 1e6,
        "peak_rss_mib": rss, "bytes_per_event": rss * 2**20 / ev, "bytes_per_event_over_base": (rss - base_rss) * 2**20 / ev,
        "major_faults": best["major"], "minor_faults": best["minor"],
    }


def report(name: str, res: dict[int, dict[str, float]]) -> None:
    small = res[min(res)]
    print(f"\n{name}")
    print("| events | CPU best / median s (user + sys) | wall best / median s | µs/event CPU (vs smallest) | "
          "µs/event wall | peak RSS | B/event (over the floor) | faults major / minor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in res.values():
        print(f"| {r['events']:,} | {r['cpu_best_s']:.2f} / {r['cpu_median_s']:.2f} ({r['user_s']:.2f} + {r['sys_s']:.2f}) | "
              f"{r['wall_best_s']:.2f} / {r['wall_median_s']:.2f} | {r['us_per_event_cpu']:.3f} "
              f"({r['us_per_event_cpu'] / small['us_per_event_cpu']:.2f}x) | {r['us_per_event_wall']:.3f} | "
              f"{r['peak_rss_mib']:.0f} MiB | {r['bytes_per_event']:.0f} ({r['bytes_per_event_over_base']:.0f}) | "
              f"{r['major_faults']:.0f} / {r['minor_faults']:.0f} |")
    big = res[max(res)]
    ratio = big["us_per_event_cpu"] / small["us_per_event_cpu"]
    worst = max(r["bytes_per_event_over_base"] for r in res.values())
    print(f"time per event, {big['events']:,} against {small['events']:,} events: {ratio:.2f}x in CPU "
          f"({big['us_per_event_wall'] / small['us_per_event_wall']:.2f}x wall): "
          f"{'holds' if ratio <= TIME_RATIO else 'does not hold'} (target {TIME_RATIO}x)")
    print(f"memory: at most {worst:.0f} B per event over the floor: "
          f"{'holds' if worst <= BYTES_PER_EVENT else 'does not hold'} (target {BYTES_PER_EVENT} B)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e6, 5e6], help="events per trace")
    ap.add_argument("--big", action="store_true", help="add 20M events (gzipped unless --sizes says otherwise)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gzip", action="store_true", help="write .json.gz (the default for --big)")
    ap.add_argument("--dir", type=Path, help="where the traces are written (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the traces written (with --dir)")
    ap.add_argument("--base-events", type=int, default=30_000, help="the small trace giving the process's floor")
    ap.add_argument("--against", metavar="SRC", help="another tree's src, timed in the same rounds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes} | ({20_000_000} if args.big else set()))
    gz = args.gzip or args.big
    tmp = Path(tempfile.mkdtemp(prefix="polyprof-scale-")) if args.dir is None else args.dir
    tmp.mkdir(parents=True, exist_ok=True)
    trees = {"this tree": str(ROOT / "src")} | ({"against": args.against} if args.against else {})
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; {os.cpu_count()} CPUs", flush=True)
    written: list[Path] = []
    try:
        files = {n: trace_file(tmp, n, gz) for n in sizes}
        base = trace_file(tmp, args.base_events, False)
        written = [*files.values(), base]
        for src in trees.values():  # untimed warm-up: bytecode caches (child_env.py)
            timed(src, base)
        floor = {k: min(timed(src, base)["rss"] for _ in range(2)) for k, src in trees.items()}
        runs: dict[str, dict[int, list[dict[str, float]]]] = {k: {n: [] for n in sizes} for k in trees}
        for i in range(args.rounds):
            order = sizes if i % 2 == 0 else sizes[::-1]
            for n in order:
                for k in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
                    r = timed(trees[k], files[n])
                    runs[k][n].append(r)
                    print(f"  round {i + 1} {k}: {n:,} events: CPU {r['cpu']:.2f} s ({r['user']:.2f} + {r['sys']:.2f}) "
                          f"wall {r['wall']:.2f} s, peak {r['rss']:.0f} MiB, faults {r['major']} / {r['minor']}",
                          flush=True)
    finally:
        if not (args.keep and args.dir):
            for p in written:
                p.unlink(missing_ok=True)
            if args.dir is None:
                shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    result = {k: {n: summarise(rs, floor[k]) for n, rs in by.items()} for k, by in runs.items()}
    if args.json:
        print(json.dumps({"load_before": load0, "load_after": load1, "floor_mib": floor, "result": result}, indent=2))
        return 0
    for k, res in result.items():
        report(f"{k} ({trees[k]}), floor {floor[k]:.0f} MiB ({args.base_events:,}-event trace), best of "
               f"{args.rounds} round(s), {'gzipped' if gz else 'plain'} JSON", res)
    print(f"\nload average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
