"""Diff benchmark: ``polyprof diff`` against Holistic Trace Analysis' ``TraceDiff``.

Run A is a Kineto trace (default: the V100 one), run B a copy in which the kernel with
the most device time is 30% longer (written once, with the stdlib). Each tool in a fresh
process per round, rounds alternating, after one untimed warm-up child per tool:

* polyprof: ``polyprof.load`` of both, ``analyze.diff.diff`` (kernels, ops and sections
  with counts, totals, deltas and the per-step Mann-Whitney test, the verdict), and the
  rendered terminal tables (``cli.diff.render``).
* HTA: ``LabeledTrace`` of both run directories (its parse), then
  ``TraceDiff.compare_traces`` over every rank and iteration, CPU ops and GPU kernels
  (counts, total durations, deltas; no significance test).

Reported: best and median seconds (load, diff, total) and HTA / polyprof ratios (best,
median, round by round). Also a check that both tools see the injected change.

    python bench/diff.py                        # V100 trace, 5 rounds
    python bench/diff.py FILE --repeat 9 --json

HTA runs from --hta-python, $POLYPROF_HTA_PYTHON, /work/venv-hta/bin/python, or this
interpreter when it can import ``hta``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
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
SLOWDOWN = 1.3

_POLYPROF = r"""
import io, json, sys, time, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
import polyprof
from polyprof.analyze.diff import diff
from polyprof.cli.diff import render
t1 = time.perf_counter()
a, b = polyprof.load(sys.argv[1]), polyprof.load(sys.argv[2])
t2 = time.perf_counter()
d = diff(a, b)
import contextlib
with contextlib.redirect_stdout(io.StringIO()):
    render(d, 15)
t3 = time.perf_counter()
k = d.tables["kernels"].set_index("name")
row = k.loc[k["raw_names"].map(lambda r: sys.argv[3] in r)].iloc[0]
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "diff": t3 - t2, "events": a.n_events + b.n_events,
                  "target_delta_ns": int(row["delta_total_ns"]), "target_change": row["change"],
                  "changes": len(d.changes)}))
"""

_HTA = r"""
import json, sys, time, logging, warnings, io, contextlib
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
t1 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    a, b = LabeledTrace("A", trace_dir=sys.argv[1]), LabeledTrace("B", trace_dir=sys.argv[2])
    t2 = time.perf_counter()
    df = TraceDiff.compare_traces(a, b, control_rank=a.ranks(), test_rank=b.ranks(),
                                  control_iteration=a.iterations(), test_iteration=b.iterations(),
                                  device_type=DeviceType.ALL)
    t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "diff": t3 - t2,
                  "target_delta_us": float(df.loc[sys.argv[3], "diff_duration"])}))
"""


def hta_python(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("POLYPROF_HTA_PYTHON"), "/work/venv-hta/bin/python"):
        if cand and Path(cand).exists():
            return cand
    ok = subprocess.run([sys.executable, "-c", "import hta.trace_diff"], capture_output=True).returncode == 0
    return sys.executable if ok else None


def run(cmd: list[str], env: dict[str, str]) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode:
        raise RuntimeError(f"{cmd[0]} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def make_runs(src: Path, tmp: Path) -> str:
    """tmp/a/<src> (a link) and tmp/b/<src> with the top kernel SLOWDOWN x longer; its name."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    total: collections.Counter = collections.Counter()
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            total[e["name"]] += e["dur"]
    target = total.most_common(1)[0][0]
    doc["traceEvents"] = [{**e, "dur": round(e["dur"] * SLOWDOWN, 3)}
                          if e.get("cat") == "kernel" and e.get("name") == target else e for e in doc["traceEvents"]]
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    (tmp / "a" / src.name).symlink_to(src.resolve())
    with gzip.open(tmp / "b" / src.name, "wt") as f:
        json.dump(doc, f)
    return target


def summarise(rounds: list[dict]) -> dict:
    out = {}
    for k in ("import", "load", "diff"):
        vals = [r[k] for r in rounds]
        out[k] = {"best": min(vals), "median": statistics.median(vals)}
    tot = [r["load"] + r["diff"] for r in rounds]
    out["total"] = {"best": min(tot), "median": statistics.median(tot)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", default=str(KINETO / "v100_ns_resolution_rank0.json.gz"),
                    help="Kineto trace for run A (default: the V100 one)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hta-python", help="interpreter with holistictraceanalysis installed")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    src = Path(args.file)
    hta = hta_python(args.hta_python)
    tmp = Path(tempfile.mkdtemp(prefix="polyprof-bench-diff-"))
    try:
        target = make_runs(src, tmp)
        a, b = tmp / "a" / src.name, tmp / "b" / src.name
        pp_cmd = [sys.executable, "-c", _POLYPROF, str(a), str(b), target]
        ht_cmd = [hta, "-c", _HTA, str(tmp / "a"), str(tmp / "b"), target] if hta else None
        env, henv = child_env(str(ROOT / "src")), child_env()
        run(pp_cmd, env)  # warm-up: bytecode, file cache
        if ht_cmd:
            run(ht_cmd, henv)
        pp, ht = [], []
        for _ in range(args.repeat):
            pp.append(run(pp_cmd, env))
            if ht_cmd:
                ht.append(run(ht_cmd, henv))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"file": src.name, "events": pp[0]["events"], "repeat": args.repeat, "target": target,
              "polyprof": summarise(pp), "polyprof_target": {"delta_ns": pp[0]["target_delta_ns"],
                                                             "change": pp[0]["target_change"],
                                                             "changes": pp[0]["changes"]}}
    if ht:
        result["hta"] = summarise(ht)
        result["hta_target_delta_us"] = ht[0]["target_delta_us"]
        for k in ("total", "load", "diff"):
            result[f"ratio_{k}"] = {s: result["hta"][k][s] / result["polyprof"][k][s] for s in ("best", "median")}
        paired = [(h["load"] + h["diff"]) / (p["load"] + p["diff"]) for p, h in zip(pp, ht)]
        result["ratio_total"].update(paired_median=statistics.median(paired), paired_min=min(paired))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print(result)
    return 0


def _print(r: dict) -> None:
    p = r["polyprof"]
    print(f"{r['file']} vs a copy with {r['target'][:60]} x{SLOWDOWN}: {r['events']} events in all, "
          f"{r['repeat']} rounds (fresh process each)")
    print(f"polyprof  load {p['load']['best']:.3f} s  diff+render {p['diff']['best']:.3f} s  total "
          f"{p['total']['best']:.3f} s (best; median {p['total']['median']:.3f} s); target delta "
          f"{r['polyprof_target']['delta_ns'] / 1e6:.3f} ms, change {r['polyprof_target']['change']!r}, "
          f"{r['polyprof_target']['changes']} significant changes in all")
    if "hta" not in r:
        print("HTA not found (see --hta-python); no ratio")
        return
    h = r["hta"]
    print(f"HTA       load {h['load']['best']:.3f} s  compare_traces {h['diff']['best']:.3f} s  total "
          f"{h['total']['best']:.3f} s (best; median {h['total']['median']:.3f} s); target delta "
          f"{r['hta_target_delta_us'] / 1e3:.3f} ms")
    t = r["ratio_total"]
    print(f"ratio HTA/polyprof end to end: best {t['best']:.1f}x, median {t['median']:.1f}x, round by round "
          f"median {t['paired_median']:.1f}x, lowest {t['paired_min']:.1f}x; load {r['ratio_load']['best']:.1f}x, "
          f"diff {r['ratio_diff']['best']:.1f}x (best)")


if __name__ == "__main__":
    sys.exit(main())
