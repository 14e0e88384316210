"""Ingest benchmark: load one Kineto trace with polyprof and with Holistic Trace Analysis.

Each load runs in its own fresh process (so peak memory is that process's own), several
times alternating between the two tools; the best time and the lowest peak of each are
compared. Time is the load call only; peak memory is the child's ru_maxrss (imports
included), also shown above the child's RSS right after its imports.

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

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

_CHILD = r"""
import json, resource, sys, time, logging
logging.disable(logging.CRITICAL)
tool, path = sys.argv[1], sys.argv[2]
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
else:
    from hta.common.trace import parse_trace_file
    base = rss_mb()
    t0 = time.perf_counter()
    meta, df, symbols = parse_trace_file(path)
    dt = time.perf_counter() - t0
    n = len(df)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": dt, "peak_mb": peak, "base_mb": base, "events": n}))
"""


def find_hta(explicit: str | None) -> str | None:
    for cand in (explicit, os.environ.get("POLYPROF_HTA_PYTHON"), "/work/venv-hta/bin/python", sys.executable):
        if cand and Path(cand).exists():
            ok = subprocess.run([cand, "-c", "import hta.common.trace"], capture_output=True).returncode == 0
            if ok:
                return cand
    return None


def run_child(python: str, tool: str, path: Path) -> dict:
    env = dict(os.environ)
    if tool == "polyprof":
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    else:
        env.pop("PYTHONPATH", None)
    out = subprocess.run([python, "-c", _CHILD, tool, str(path)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} failed on {path}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def replicate(src: Path, times: int, out_dir: Path) -> Path:
    """A bigger Kineto file: the traceEvents text of ``src`` repeated ``times`` times."""
    raw = gzip.open(src, "rb").read() if src.name.endswith(".gz") else src.read_bytes()
    m = re.search(rb'"traceEvents"\s*:\s*\[', raw)
    if not m:
        raise SystemExit(f"{src}: no traceEvents array")
    doc = json.loads(raw)
    body = json.dumps(doc.pop("traceEvents"))[1:-1]
    # keep the original event text (three-decimal timestamps) by cutting it out of the file
    start = m.end()
    end = raw.rindex(b"]", 0, raw.rindex(b'"traceName"') if b'"traceName"' in raw[start:] else len(raw))
    events_text = raw[start:end].strip().rstrip(b",")
    if not events_text.endswith(b"}"):
        events_text = body.encode()
    out = out_dir / f"{src.name.split('.')[0]}_x{times}.json.gz"
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(raw[:start] + b",\n".join([events_text] * times) + b"\n" + raw[end:])
    return out


def bench(path: Path, hta_python: str | None, repeat: int) -> dict:
    res: dict[str, list[dict]] = {"polyprof": [], "hta": []}
    for _ in range(repeat):
        res["polyprof"].append(run_child(sys.executable, "polyprof", path))
        if hta_python:
            res["hta"].append(run_child(hta_python, "hta", path))
    summary = {}
    for tool, runs in res.items():
        if runs:
            summary[tool] = {"seconds": min(r["seconds"] for r in runs),
                             "peak_mb": min(r["peak_mb"] for r in runs),
                             "above_base_mb": min(r["peak_mb"] - r["base_mb"] for r in runs),
                             "events": runs[0]["events"]}
    return summary


def report(path: Path, s: dict) -> None:
    size = path.stat().st_size / 2 ** 20
    print(f"\n{path.name} ({size:.1f} MiB on disk)")
    print(f"  {'tool':<10} {'load s':>8} {'peak MiB':>9} {'above imports':>14} {'events':>9}")
    for tool, r in s.items():
        print(f"  {tool:<10} {r['seconds']:>8.3f} {r['peak_mb']:>9.1f} {r['above_base_mb']:>14.1f} {r['events']:>9}")
    if "hta" in s:
        p, h = s["polyprof"], s["hta"]
        speed = h["seconds"] / p["seconds"]
        mem = p["peak_mb"] / h["peak_mb"]
        mem2 = p["above_base_mb"] / max(h["above_base_mb"], 1e-9)
        print(f"  polyprof is {speed:.1f}x faster (target >= 5x: {'met' if speed >= 5 else 'MISSED'}); "
              f"peak memory {mem:.2f}x HTA's (target <= 0.5x: {'met' if mem <= 0.5 else 'MISSED'}); "
              f"above imports {mem2:.2f}x")


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
