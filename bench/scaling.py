"""Scaling benchmark: load + every analysis + rendered summary at 1x, 4x and 16x a trace.

The bigger files repeat the trace's events N times (as text, so times keep their
digits), each copy moved later by the trace's span (and its correlation ids, external
ids and flow ids moved past the previous copy's), so the copies are a longer run of the same program, not events stacked on one
another. Each size runs in fresh processes (imports not timed), rounds alternating
between the sizes; reported per size: best and median seconds, and µs per event, with
the ratio of each size's time per event to the 1x file's (target: within 20%).

    python bench/scaling.py                         # the V100 trace, 1x 4x 16x, 3 rounds
    python bench/scaling.py FILE --sizes 1 4 16 --repeat 5 --json
    python bench/scaling.py --profile 16            # cProfile of one 16x run, top functions
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

_CHILD = r"""
import io, json, logging, sys, time
logging.disable(logging.CRITICAL)
import polyprof
from polyprof.report.terminal import print_summary
import polyprof.formats.detect, polyprof.formats.kineto  # the readers: imports are not timed (lazy since 6140c01)
from rich.console import Console
profile = len(sys.argv) > 2
if profile:
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
t0 = time.perf_counter()
trace = polyprof.load(sys.argv[1])
t1 = time.perf_counter()
print_summary(trace, console=Console(file=io.StringIO(), width=160))
t2 = time.perf_counter()
if profile:
    pr.disable()
    pstats.Stats(pr, stream=sys.stderr).sort_stats("tottime").print_stats(int(sys.argv[2]))
print(json.dumps({"load": t1 - t0, "summary": t2 - t1, "events": trace.n_events}))
"""

_TS = re.compile(rb'"ts": ?(\d+)(?:\.(\d{1,3}))?\b')
_IDS = re.compile(rb'"(id|correlation|External id)": ?(\d+)\b')
_STEP = re.compile(rb"ProfilerStep#(\d+)")


def replicate(src: Path, times: int, out_dir: Path) -> Path:
    """``src`` with its events repeated ``times`` times as text (times keep their digits),
    copy k moved by k spans, its ids (flows, correlation, external) by k times the largest,
    its step numbers (``ProfilerStep#N``) by k times the number of steps: a longer run of
    the same program numbers its steps on (copies that kept the numbers would read as
    repeated steps, numbered in time order: docs/analysis.md, "Step numbers")."""
    raw = gzip.open(src, "rb").read() if src.name.endswith(".gz") else src.read_bytes()
    m = re.search(rb'"traceEvents"\s*:\s*\[', raw)
    end = re.compile(rb"}\s*\]\s*(,\s*\"|})").search(raw, m.end()) if m else None
    if not m or not end:
        raise SystemExit(f"{src}: no traceEvents array found")
    text = raw[m.end():end.start() + 1]
    ns = [int(a) * 1000 + int((b or b"0").ljust(3, b"0")) for a, b in _TS.findall(text)]
    span = max(ns) - min(ns) + 1_000_000
    top = max(int(v) for _, v in _IDS.findall(text)) + 1
    numbers = [int(v) for v in _STEP.findall(text)]
    n_steps = max(numbers) - min(numbers) + 1 if numbers else 0
    copies = [text]
    for k in range(1, times):
        def ts(mm: re.Match, k: int = k) -> bytes:
            v = int(mm.group(1)) * 1000 + int((mm.group(2) or b"0").ljust(3, b"0")) + k * span
            return b'"ts": %d.%03d' % (v // 1000, v % 1000)

        def ids(mm: re.Match, k: int = k) -> bytes:
            return b'"%s": %d' % (mm.group(1), int(mm.group(2)) + k * top)

        def step(mm: re.Match, k: int = k) -> bytes:
            return b"ProfilerStep#%d" % (int(mm.group(1)) + k * n_steps)

        copies.append(_STEP.sub(step, _IDS.sub(ids, _TS.sub(ts, text))))
    out = out_dir / f"{src.name.split('.')[0]}_x{times}.json.gz"
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(raw[:m.end()] + b",\n".join(copies) + raw[end.start() + 1:])
    return out


def run(path: Path, profile: int = 0) -> dict:
    cmd = [sys.executable, "-c", _CHILD, str(path)] + ([str(profile)] if profile else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(str(ROOT / "src")), timeout=1200)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    if profile:
        print(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (one fresh process per size each)")
    ap.add_argument("--profile", type=int, metavar="N", help="profile one run of the N-times file and stop")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="polyprof-scaling-") as tmp:
        files = {n: args.file if n == 1 else replicate(args.file, n, Path(tmp)) for n in sorted(set(args.sizes))}
        if args.profile:
            path = files.get(args.profile) or replicate(args.file, args.profile, Path(tmp))
            run(path, 40)
            return 0
        for path in files.values():  # warm-up: bytecode, file cache
            run(path)
        rounds: dict[int, list[dict]] = {n: [] for n in files}
        for _ in range(args.repeat):
            for n, path in files.items():
                rounds[n].append(run(path))
    result = {}
    for n, rs in rounds.items():
        tot = [r["load"] + r["summary"] for r in rs]
        ev = rs[0]["events"]
        result[n] = {"events": ev, "best_s": min(tot), "median_s": statistics.median(tot),
                     "load_best_s": min(r["load"] for r in rs), "summary_best_s": min(r["summary"] for r in rs),
                     "us_per_event_best": min(tot) / ev * 1e6, "us_per_event_median": statistics.median(tot) / ev * 1e6}
    base = result[min(result)]
    for r in result.values():
        r["per_event_vs_1x_best"] = r["us_per_event_best"] / base["us_per_event_best"]
        r["per_event_vs_1x_median"] = r["us_per_event_median"] / base["us_per_event_median"]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.file.name}, {args.repeat} rounds, fresh process per run (load + summary)")
    for n, r in result.items():
        print(f"  x{n:<3} {r['events']:>8} events  best {r['best_s']:.3f} s (load {r['load_best_s']:.3f}, summary "
              f"{r['summary_best_s']:.3f})  median {r['median_s']:.3f} s  {r['us_per_event_best']:.2f} / "
              f"{r['us_per_event_median']:.2f} µs per event (best / median)  vs x{min(result)}: "
              f"{r['per_event_vs_1x_best']:.2f} / {r['per_event_vs_1x_median']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
