"""Diff benchmark: ``polyprof diff`` against Holistic Trace Analysis' ``TraceDiff``, and
how often ``polyprof diff`` calls an unchanged program changed (``--aa``).

Speed. Run A is a Kineto trace (default: the V100 one), run B a copy in which the kernel
with the most device time is 30% longer (written once, with the stdlib). Each tool in a
fresh process per round, rounds alternating, after one untimed warm-up child per tool:

* polyprof: ``polyprof.load`` of both, ``analyze.diff.diff`` over every step as HTA
  (``window=None``: kernels, ops and sections with counts, totals, deltas, the per-step
  test per rank with Holm's correction and the effect floor, the verdict) as the command
  computes it (polyprof's Tables, no pandas), and the rendered terminal
  tables (``cli.diff.render``).
* HTA: ``LabeledTrace`` of both run directories (its parse), then
  ``TraceDiff.compare_traces`` over every rank and iteration, CPU ops and GPU kernels
  (counts, total durations, deltas; no significance test).

Reported: best and median seconds (load, diff, total) and HTA / polyprof ratios (best,
median, round by round), the load average. Also a check that both tools see the
injected change.

False alarms (``--aa K``): a small torch CPU training script (tests/test_diff.py's
``TRAIN``) run K times as pairs of processes one after the other, as a user runs a
program twice, each pair diffed with ``polyprof diff A B --json``: how many pairs had
any row (or the step time) called changed, and which rows. ``--synthetic N``: N pairs of
tests/test_diff.py's synthetic workload (200 kernels, 10 steps, each kernel's noise
1-5%), A and B from one distribution, diffed in process with the floors off (the
correction alone) and on, with each test: the share of pairs with any row called.

    python bench/diff.py                        # V100 trace, 5 rounds
    python bench/diff.py FILE --repeat 9 --json
    python bench/diff.py --aa 10                # 10 A/A pairs of the torch script
    python bench/diff.py --aa 10 --together     # the two processes of each pair at once
    python bench/diff.py --synthetic 200        # 200 synthetic A/A pairs, floors off and on

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
from polyprof.analyze.frames import column
from polyprof.cli.diff import render
t1 = time.perf_counter()
a, b = polyprof.load(sys.argv[1]), polyprof.load(sys.argv[2])
t2 = time.perf_counter()
d = diff(a, b, window=None)  # as `polyprof diff` computes them: Tables, no pandas
import contextlib
with contextlib.redirect_stdout(io.StringIO()):
    render(d, 15)
t3 = time.perf_counter()
k = d.tables["kernels"]
i = next(i for i, r in enumerate(column(k, "raw_names")) if sys.argv[3] in r)
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "diff": t3 - t2, "events": a.n_events + b.n_events,
                  "target_delta_ns": int(column(k, "delta_total_ns")[i]), "target_change": column(k, "change")[i],
                  "changes": len(d.changes), "pandas": "pandas" in sys.modules}))
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
    ap.add_argument("--aa", type=int, metavar="K", help="instead: K A/A pairs of the torch script, diffed")
    ap.add_argument("--together", action="store_true", help="with --aa: the two processes of a pair at once")
    ap.add_argument("--synthetic", type=int, metavar="N", help="instead: N synthetic A/A pairs, diffed in process")
    args = ap.parse_args(argv)
    if args.aa:
        return false_alarms(args.aa, args.json, args.together)
    if args.synthetic:
        return synthetic_false_alarms(args.synthetic)
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


def false_alarms(pairs: int, as_json: bool, together: bool = False) -> int:
    """K A/A pairs of the torch script, one process after the other (``together``: at
    the same time), each diffed."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_diff import TRAIN

    env = child_env(str(ROOT / "src"))
    tmp = Path(tempfile.mkdtemp(prefix="polyprof-bench-aa-"))
    results = []
    try:
        script = tmp / "train.py"
        script.write_text(TRAIN)
        for k in range(pairs):
            paths = [tmp / f"{k}{s}.json" for s in "ab"]
            if together:  # both processes at once, as tests/test_diff.py's A/A test
                procs = [subprocess.Popen([sys.executable, str(script), str(p)], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL) for p in paths]
                if any(p.wait(timeout=900) for p in procs):
                    raise RuntimeError("the torch script failed")
            for p in paths if not together else []:
                subprocess.run([sys.executable, str(script), str(p)], env=env, check=True, capture_output=True,
                               timeout=900)
            out = subprocess.run([sys.executable, "-m", "polyprof", "diff", *map(str, paths), "--json"], env=env,
                                 check=True, capture_output=True, text=True, timeout=900)
            doc = json.loads(out.stdout)
            results.append({"changes": [f"{c['table']}:{c['name']} {c['change']}" for c in doc["verdict"]["changes"]],
                            "step_time": doc["step_time"]["change"], "rows_tested": doc["overview"]["rows_tested"],
                            "headline": doc["verdict"]["text"][0]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    alarms = [r for r in results if r["changes"] or r["step_time"]]
    summary = {"pairs": pairs, "pairs_with_a_change_called": len(alarms), "load_average": os.getloadavg()[0],
               "results": results}
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    how = "at the same time" if together else "one after the other"
    print(f"{pairs} A/A pairs of the torch script (processes {how}): {len(alarms)} with a change "
          f"called ({100 * len(alarms) / pairs:.0f}%); rows tested per pair "
          f"{min(r['rows_tested'] for r in results)}-{max(r['rows_tested'] for r in results)}; "
          f"load average {summary['load_average']:.1f}")
    for r in alarms:
        print(f"  {r['headline']} {'; '.join(r['changes'])} {('step time ' + r['step_time']) if r['step_time'] else ''}")
    return 0


def synthetic_false_alarms(pairs: int) -> int:
    """N synthetic A/A pairs: the share with any row called, per test, floors off and on."""
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "tests"))
    import numpy as np
    from test_diff import synthetic_run, workload

    from polyprof.analyze.diff import ABS_FLOOR_NS, REL_FLOOR, diff

    print(f"{pairs} synthetic A/A pairs, 200 kernels, 10 steps (9 analysed) a side, alpha 0.05, Holm")
    for test in ("t", "rank"):
        for floors in ((0.0, 0.0), (REL_FLOOR, ABS_FLOOR_NS)):
            rng = np.random.default_rng(123)
            base, noise = workload(rng)
            called = sum(bool(diff(synthetic_run(rng, base, noise), synthetic_run(rng, base, noise), test=test,
                                   rel_floor=floors[0], abs_floor_ns=floors[1]).changes) for _ in range(pairs))
            print(f"  test {test}, floors {100 * floors[0]:g}% and {floors[1] / 1000:g} µs: {called} of {pairs} "
                  f"pairs with a row called ({100 * called / pairs:.1f}%)")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


def _print(r: dict) -> None:
    p = r["polyprof"]
    print(f"{r['file']} vs a copy with {r['target'][:60]} x{SLOWDOWN}: {r['events']} events in all, "
          f"{r['repeat']} rounds (fresh process each); load average {os.getloadavg()[0]:.1f}")
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
