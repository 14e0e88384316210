"""Analysis benchmark: polyprof's summary + breakdowns against Holistic Trace Analysis.

On one Kineto trace (default: the largest shared one), in fresh processes, alternating:

* polyprof: ``polyprof.load`` then every analysis table and the findings
  (``report.tables.build``: temporal, idle-time, kernel, op, section, step, launch
  statistics, comm/compute overlap, findings) and the rendered terminal summary.
* HTA: ``TraceAnalysis(trace_dir=...)`` (its parse) then ``get_temporal_breakdown`` and
  ``get_gpu_kernel_breakdown`` (``visualize=False``).

Reported: best and median seconds of load, analysis and both together, and the ratio
HTA / polyprof for the end-to-end time (load + analyses; also round by round, each HTA
child against the polyprof child just before it: median and lowest), for HTA's two breakdowns
against polyprof's whole summary, and for the same two breakdowns (polyprof's
``temporal_breakdown`` + ``kernel_breakdown`` on a freshly loaded trace, so the
correlation and classification they need are included).

    python bench/analyze.py                  # the largest shared trace, 5 rounds
    python bench/analyze.py FILE --repeat 3 --json

HTA pins its own pandas/numpy, so it runs from another interpreter: --hta-python,
$POLYPROF_HTA_PYTHON, or /work/venv-hta/bin/python (``python -m venv /work/venv-hta &&
/work/venv-hta/bin/pip install holistictraceanalysis``), else this interpreter when it has
``hta`` (the test extra installs it). Without it only polyprof's
figures are printed. Children import with bytecode caching on and one untimed warm-up
child per tool runs first (see ``child_env.py``). Neither tool's imports are timed:
HTA's parser comes with ``from hta.trace_analysis import TraceAnalysis``; polyprof's
Kineto reader (and msgspec) is imported on first load, so its child imports it first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto"

_POLYPROF = r"""
import io, json, sys, time, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
import polyprof
from polyprof.report.tables import build
from polyprof.report.terminal import render
from rich.console import Console
import polyprof.formats.kineto  # the reader (msgspec...), imported untimed as HTA's parser is
t1 = time.perf_counter()
import polyprof.analyze as A
trace = polyprof.load(sys.argv[1])
t2 = time.perf_counter()
report = build(trace)  # what `polyprof summary` computes (report/terminal.py: print_summary)
render(report, console=Console(file=io.StringIO(), width=160))
t3 = time.perf_counter()
fresh = polyprof.load(sys.argv[1])  # same analyses as HTA's two, on a trace with nothing cached
t4 = time.perf_counter()
A.temporal_breakdown(fresh)
A.kernel_breakdown(fresh)
t5 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "analyze": t3 - t2, "breakdowns": t5 - t4,
                  "events": trace.n_events, "findings": [f.id for f in report.findings]}))
"""

_HTA = r"""
import json, sys, time, logging, warnings, io, contextlib
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    a = TraceAnalysis(trace_dir=sys.argv[1])
    t2 = time.perf_counter()
    tb = a.get_temporal_breakdown(visualize=False)
    kb = a.get_gpu_kernel_breakdown(visualize=False)
    t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "analyze": t3 - t2, "breakdowns": t3 - t2,
                  "idle_pct": float(tb["idle_time_pctg"].iloc[0]), "compute_pct": float(tb["compute_time_pctg"].iloc[0])}))
"""


def hta_python(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("POLYPROF_HTA_PYTHON"), "/work/venv-hta/bin/python"):
        if cand and Path(cand).exists():
            return cand
    import importlib.util  # the test extra installs HTA beside polyprof

    return sys.executable if importlib.util.find_spec("hta") else None


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode:
        raise RuntimeError(f"{cmd[0]} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def summarise(rounds: list[dict]) -> dict:
    out = {}
    for k in ("import", "load", "analyze", "breakdowns"):
        vals = [r[k] for r in rounds]
        out[k] = {"best": min(vals), "median": statistics.median(vals)}
    tot = [r["load"] + r["analyze"] for r in rounds]
    out["total"] = {"best": min(tot), "median": statistics.median(tot)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", help="Kineto trace (default: the largest shared one)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hta-python", help="interpreter with holistictraceanalysis installed")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    path = Path(args.file) if args.file else max(KINETO.glob("*.json*"), key=lambda p: p.stat().st_size)
    env = child_env(str(ROOT / "src"))
    hta = hta_python(args.hta_python)
    tmp = Path(tempfile.mkdtemp(prefix="polyprof-bench-"))
    try:
        (tmp / path.name).symlink_to(path.resolve())  # HTA reads a directory of rank traces
        pp, ht = [], []
        run([sys.executable, "-c", _POLYPROF, str(path)], env)  # warm-up: bytecode, file cache
        if hta:
            run([hta, "-c", _HTA, str(tmp)], child_env())
        for _ in range(args.repeat):
            pp.append(run([sys.executable, "-c", _POLYPROF, str(path)], env))
            if hta:
                ht.append(run([hta, "-c", _HTA, str(tmp)], child_env()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"file": path.name, "events": pp[0]["events"], "repeat": args.repeat,
              "polyprof": summarise(pp), "findings": pp[0]["findings"]}
    if ht:
        result["hta"] = summarise(ht)
        result["hta_breakdown"] = {"idle_pct": ht[0]["idle_pct"], "compute_pct": ht[0]["compute_pct"]}
        for k in ("total", "analyze", "breakdowns"):
            result[f"ratio_{k}"] = {s: result["hta"][k][s] / result["polyprof"][k][s] for s in ("best", "median")}
        # each round's HTA child ran right after its polyprof child: a burst of load on the
        # shared machine hits both of a pair more often than two tools' best rounds
        paired = [(h["load"] + h["analyze"]) / (p["load"] + p["analyze"]) for p, h in zip(pp, ht)]
        result["ratio_total"]["paired_median"] = statistics.median(paired)
        result["ratio_total"]["paired_min"] = min(paired)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    p = result["polyprof"]
    print(f"{path.name}: {result['events']} events, {args.repeat} rounds (fresh process each)")
    print(f"polyprof  load {p['load']['best']:.3f} s  summary (every table, findings, rendered) "
          f"{p['analyze']['best']:.3f} s  total {p['total']['best']:.3f} s (best; median total "
          f"{p['total']['median']:.3f} s); temporal+kernel breakdowns alone {p['breakdowns']['best']:.3f} s; "
          f"import {p['import']['best']:.2f} s")
    if ht:
        h = result["hta"]
        print(f"HTA       load {h['load']['best']:.3f} s  temporal+kernel {h['analyze']['best']:.3f} s  "
              f"total {h['total']['best']:.3f} s (best; median total {h['total']['median']:.3f} s); "
              f"import {h['import']['best']:.2f} s")
        r = result
        print(f"ratio HTA/polyprof (best, median): end-to-end load+analyses {r['ratio_total']['best']:.1f}x, "
              f"{r['ratio_total']['median']:.1f}x (round by round: median {r['ratio_total']['paired_median']:.1f}x, "
              f"lowest {r['ratio_total']['paired_min']:.1f}x); HTA's two breakdowns vs polyprof's whole summary "
              f"{r['ratio_analyze']['best']:.1f}x, {r['ratio_analyze']['median']:.1f}x; the same two breakdowns "
              f"{r['ratio_breakdowns']['best']:.1f}x, {r['ratio_breakdowns']['median']:.1f}x")
    else:
        print("HTA not found (see --hta-python); no ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
