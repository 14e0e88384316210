"""Ingest benchmark: load one Kineto trace with polyprof and with Holistic Trace Analysis.

Each load runs in its own fresh process (so peak memory is that process's own), several
times alternating between the two tools; the best time and the lowest peak of each are
compared. Time is the load call only; peak memory is the child's VmHWM (its peak RSS,
imports included), also shown above the child's RSS right after its imports. polyprof's
reader leaves most Kineto args to be typed on first use (trace.stats.StatTable), so its
child also times decoding every stat after the load ("+all stats": load + that, and the
peak after it); HTA's load already holds all its columns, so for HTA both are the load.

    python bench/ingest.py                       # the largest shared trace
    python bench/ingest.py FILE --repeat 5
    python bench/ingest.py --replicate 4         # also a synthetic file 4x the events

HTA (``pip install holistictraceanalysis``) pins its own pandas/numpy, so it is looked
for in this order: --hta-python, $POLYPROF_HTA_PYTHON, /work/venv-hta/bin/python, this
interpreter. To make that venv: ``python -m venv /work/venv-hta &&
/work/venv-hta/bin/pip install holistictraceanalysis``. Without HTA the polyprof
figures are still printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

_CHILD = r"""
import json, resource, sys, time, logging
logging.disable(logging.CRITICAL)
tool, path = sys.argv[1], sys.argv[2]
def hwm_mb():  # this process image's own peak (ru_maxrss would carry the parent's over exec)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
if tool == "polyprof":
    from polyprof.formats.kineto import load
    base = rss_mb()
    t0 = time.perf_counter()
    tr = load(path)
    dt = time.perf_counter() - t0
    n = tr.n_events
    peak_load = hwm_mb()
    t1 = time.perf_counter()
    len(tr.stats)  # decodes the deferred stats (every Kineto arg)
    dt_all = dt + time.perf_counter() - t1
elif tool == "hta":  # HTA's reader: JSON -> one DataFrame (+ its flow/iteration columns)
    from hta.common.trace import parse_trace_file
    base = rss_mb()
    t0 = time.perf_counter()
    meta, df, symbols = parse_trace_file(path)
    dt = time.perf_counter() - t0
    n = len(df)
else:  # "hta-full": what TraceAnalysis(trace_dir=...) runs to load a trace
    import os
    from hta.common.trace import Trace
    base = rss_mb()
    t0 = time.perf_counter()
    t = Trace(trace_files={0: path}, trace_dir=os.path.dirname(path))
    t.load_traces(use_multiprocessing=False)
    dt = time.perf_counter() - t0
    n = len(t.get_trace(0))
peak = hwm_mb()
if tool != "polyprof":
    peak_load, dt_all = peak, dt
print(json.dumps({"seconds": dt, "peak_mb": peak_load, "base_mb": base, "events": n,
                  "seconds_all": dt_all, "peak_all_mb": peak}))
"""


def find_hta(explicit: str | None) -> str | None:
    for cand in (explicit, os.environ.get("POLYPROF_HTA_PYTHON"), "/work/venv-hta/bin/python", sys.executable):
        if cand and Path(cand).exists():
            ok = subprocess.run([cand, "-c", "import hta.common.trace"], capture_output=True).returncode == 0
            if ok:
                return cand
    return None


def run_child(python: str, tool: str, path: Path) -> dict:
    env = child_env(str(ROOT / "src") if tool == "polyprof" else None)
    out = subprocess.run([python, "-c", _CHILD, tool, str(path)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} failed on {path}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def replicate(src: Path, times: int, out_dir: Path) -> Path:
    """A bigger Kineto file: the traceEvents text of ``src`` repeated ``times`` times
    (cut out of the file as text, so timestamps keep their three decimals)."""
    raw = gzip.open(src, "rb").read() if src.name.endswith(".gz") else src.read_bytes()
    m = re.search(rb'"traceEvents"\s*:\s*\[', raw)
    end = re.compile(rb"}\s*\]\s*(,\s*\"|})").search(raw, m.end()) if m else None
    if not m or not end:
        raise SystemExit(f"{src}: no traceEvents array found")
    events_text = raw[m.end():end.start() + 1]
    out = out_dir / f"{src.name.split('.')[0]}_x{times}.json.gz"
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(raw[:m.end()] + b",\n".join([events_text] * times) + raw[end.start() + 1:])
    return out


def bench(path: Path, hta_python: str | None, repeat: int) -> dict:
    res: dict[str, list[dict]] = {"polyprof": [], "hta": [], "hta-full": []}
    run_child(sys.executable, "polyprof", path)  # warm-up: bytecode, file cache
    if hta_python:
        run_child(hta_python, "hta", path)
    for _ in range(repeat):
        res["polyprof"].append(run_child(sys.executable, "polyprof", path))
        if hta_python:
            res["hta"].append(run_child(hta_python, "hta", path))
            res["hta-full"].append(run_child(hta_python, "hta-full", path))
    summary = {}
    for tool, runs in res.items():
        if runs:
            summary[tool] = {"seconds": min(r["seconds"] for r in runs),
                             "seconds_all": min(r["seconds_all"] for r in runs),
                             "peak_mb": min(r["peak_mb"] for r in runs),
                             "peak_all_mb": min(r["peak_all_mb"] for r in runs),
                             "above_base_mb": min(r["peak_mb"] - r["base_mb"] for r in runs),
                             "events": runs[0]["events"]}
    return summary


def report(path: Path, s: dict) -> None:
    size = path.stat().st_size / 2 ** 20
    print(f"\n{path.name} ({size:.1f} MiB on disk)")
    print(f"  {'tool':<10} {'load s':>8} {'peak MiB':>9} {'above imports':>14} {'events':>9}"
          f" {'+all stats s':>13} {'peak MiB':>9}")
    for tool, r in s.items():
        print(f"  {tool:<10} {r['seconds']:>8.3f} {r['peak_mb']:>9.1f} {r['above_base_mb']:>14.1f} {r['events']:>9}"
              f" {r['seconds_all']:>13.3f} {r['peak_all_mb']:>9.1f}")
    for other in ("hta", "hta-full"):
        if other not in s:
            continue
        p, h = s["polyprof"], s[other]
        speed = h["seconds"] / p["seconds"]
        mem = p["peak_mb"] / h["peak_mb"]
        mem2 = p["above_base_mb"] / max(h["above_base_mb"], 1e-9)
        print(f"  vs {other}: polyprof {speed:.1f}x faster (target >= 5x: {'met' if speed >= 5 else 'MISSED'}); "
              f"peak memory {mem:.2f}x (target <= 0.5x: {'met' if mem <= 0.5 else 'MISSED'}); "
              f"above imports {mem2:.2f}x; with every stat decoded: "
              f"{h['seconds_all'] / p['seconds_all']:.1f}x faster, peak {p['peak_all_mb'] / h['peak_all_mb']:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool (best is kept; default 3)")
    ap.add_argument("--replicate", type=int, default=0, metavar="N",
                    help="also bench a synthetic file with the events repeated N times")
    ap.add_argument("--hta-python", help="interpreter that has holistictraceanalysis installed")
    args = ap.parse_args()
    hta = find_hta(args.hta_python)
    if not hta:
        print("HTA not found: install it with `python -m venv /work/venv-hta && "
              "/work/venv-hta/bin/pip install holistictraceanalysis` (or pass --hta-python); "
              "showing polyprof alone", file=sys.stderr)
    else:
        print(f"HTA interpreter: {hta}")
    files = [args.file]
    with tempfile.TemporaryDirectory() as tmp:
        if args.replicate > 1:
            files.append(replicate(args.file, args.replicate, Path(tmp)))
        for f in files:
            report(f, bench(f, hta, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
