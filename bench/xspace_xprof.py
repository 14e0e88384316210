"""XSpace read + summary: polyprof against XProf's own tools, cold, fresh processes.

On one XSpace file (default: the TPU sample, tests/data/traces/xspace), alternating
round by round, each in a fresh interpreter:

* polyprof: ``polyprof.load`` (the XSpace reader) then every analysis table, the
  findings and the rendered terminal summary (``print_summary``: ``report.tables.build``
  + ``render``) written to a file at 160 columns, what ``polyprof summary FILE > out``
  does (through ``report/textout.py``; a tree older than it, through rich).
* XProf: ``xprof.convert.raw_to_tool_data.xspace_to_tool_data`` for ``overview_page``
  and for ``framework_op_stats`` (each in its own process), on a fresh copy of the file
  in a new directory with ``use_saved_result: False``, so no cached op_stats is read.

Reported per tool: the work (imports excluded: the load + summary, the tool call) and
the whole child process (start to exit, imports included), best and median over the
rounds, and the ratios XProf / polyprof (best, median, and round by round: each XProf
child against the polyprof child just before it). A ratio above 1 means polyprof is
faster. The work is also timed in CPU seconds (``time.process_time``, every thread of
the child), which the other processes of a shared machine move less than wall time. One untimed warm-up child per tool runs first (bytecode, file cache).

    python bench/xspace_xprof.py [FILE] [--repeat 7] [--json] [--before DIR]

``--before DIR``: also run the polyprof child on another checkout's ``src`` (e.g. ``git
archive <commit> src | tar -x -C DIR``) in the same rounds, to compare two versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
TOOLS = ("overview_page", "framework_op_stats")
#: the children's CPU time (``time.process_time``: every thread of the process), which the
#: machine's load moves less than the wall time
CPU = ("cpu_load", "cpu_summary", "cpu_work")

_POLYPROF = r"""
import io, json, sys, time, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
try:  # what `polyprof summary` does at its start (cli/__init__.py), before NumPy loads
    from polyprof.lowlevel import blas, heap
    blas.import_numpy_single_threaded()
    heap.prepare_heap()
except (ImportError, AttributeError):  # a tree before them: OpenBLAS at one thread alike
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import polyprof
from polyprof.formats.xspace import IMPLEMENTATION
import polyprof.formats.detect  # what polyprof.load dispatches with: imports are not timed (lazy since 6140c01)
from polyprof.report.terminal import print_summary
import rich.console  # a tree that prints through rich imports it in print_summary: not timed either
t1, c1 = time.perf_counter(), time.process_time()
trace = polyprof.load(sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
stdout, sys.stdout = sys.stdout, io.StringIO()
print_summary(trace)  # what `polyprof summary FILE > out` writes, at COLUMNS=160
sys.stdout = stdout
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "summary": t3 - t2, "work": t3 - t1,
                  "cpu_load": c2 - c1, "cpu_summary": c3 - c2, "cpu_work": c3 - c1,
                  "events": trace.n_events, "decoder": IMPLEMENTATION}))
"""

# the same for a checkout that may lack formats.xspace.IMPLEMENTATION
_POLYPROF_BEFORE = _POLYPROF.replace("from polyprof.formats.xspace import IMPLEMENTATION\n", "IMPLEMENTATION = '?'\n")

_XPROF = r"""
import json, sys, time, logging, os
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from xprof.convert import raw_to_tool_data as r
t1, c1 = time.perf_counter(), time.process_time()
data, _ = r.xspace_to_tool_data([sys.argv[1]], sys.argv[2], {"use_saved_result": False})
t2, c2 = time.perf_counter(), time.process_time()
assert data, "no tool data"
print(json.dumps({"import": t1 - t0, "work": t2 - t1, "cpu_work": c2 - c1, "bytes": len(data)}))
"""


def run(cmd: list[str], env: dict[str, str]) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"{cmd[:3]} failed: {p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process"] = wall
    return out


def xprof_round(path: Path, tool: str) -> dict:
    """One cold XProf run: a fresh copy of the file in a new directory (no cache beside it)."""
    tmp = Path(tempfile.mkdtemp(prefix="polyprof-bench-xprof-"))
    try:
        copy = tmp / path.name
        shutil.copyfile(path, copy)
        return run([sys.executable, "-c", _XPROF, str(copy), tool], child_env())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stats(vals: list[float]) -> dict:
    return {"best": min(vals), "median": statistics.median(vals)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", default=str(SAMPLE), help="an .xplane.pb file (default: the TPU sample)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--before", help="a directory holding another polyprof's src/ to measure in the same rounds")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("xprof") is None:
        print("xprof is not installed (pip install xprof): nothing to compare against", file=sys.stderr)
        return 1
    path = Path(args.file).resolve()
    env = child_env(str(ROOT / "src"), COLUMNS="160")
    before_env = child_env(str(Path(args.before).resolve() / "src"), COLUMNS="160") if args.before else None
    run([sys.executable, "-c", _POLYPROF, str(path)], env)  # warm-up
    if before_env:
        run([sys.executable, "-c", _POLYPROF_BEFORE, str(path)], before_env)
    for tool in TOOLS:
        xprof_round(path, tool)
    pp: list[dict] = []
    before: list[dict] = []
    xp: dict[str, list[dict]] = {t: [] for t in TOOLS}
    for _ in range(args.repeat):
        pp.append(run([sys.executable, "-c", _POLYPROF, str(path)], env))
        if before_env:
            before.append(run([sys.executable, "-c", _POLYPROF_BEFORE, str(path)], before_env))
        for tool in TOOLS:
            xp[tool].append(xprof_round(path, tool))
    result: dict = {"file": path.name, "events": pp[0]["events"], "decoder": pp[0]["decoder"],
                    "repeat": args.repeat, "load_average": os.getloadavg(),
                    "polyprof": {k: stats([r[k] for r in pp]) for k in ("import", "load", "summary", "work",
                                                                         "process", *CPU)}}
    for tool in TOOLS:
        rs = xp[tool]
        res = {k: stats([r[k] for r in rs]) for k in ("import", "work", "process", "cpu_work")}
        for k in ("work", "process", "cpu_work"):
            paired = [x[k] / p[k] for p, x in zip(pp, rs)]
            res[f"ratio_{k}"] = {"best": res[k]["best"] / result["polyprof"][k]["best"],
                                 "median": res[k]["median"] / result["polyprof"][k]["median"],
                                 "paired_median": statistics.median(paired), "paired_min": min(paired)}
        result[tool] = res
    if before:
        result["before"] = {k: stats([r[k] for r in before]) for k in ("load", "summary", "work", "process", *CPU)}
        paired = [b["load"] / p["load"] for p, b in zip(pp, before)]
        result["before"]["load_ratio"] = {"best": result["before"]["load"]["best"] / result["polyprof"]["load"]["best"],
                                          "paired_median": statistics.median(paired), "paired_min": min(paired)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    p = result["polyprof"]
    print(f"{path.name}: {result['events']} events, {args.repeat} rounds, fresh process each "
          f"(decoder: {result['decoder']}; load average {result['load_average'][0]:.1f})")
    print(f"polyprof           load {p['load']['best']:.3f} s + summary {p['summary']['best']:.3f} s = work "
          f"{p['work']['best']:.3f} s best, {p['work']['median']:.3f} s median; process {p['process']['best']:.2f} s "
          f"best, {p['process']['median']:.2f} s median (import {p['import']['best']:.2f} s)")
    print(f"  CPU: load {p['cpu_load']['best']:.3f} s + summary {p['cpu_summary']['best']:.3f} s = work "
          f"{p['cpu_work']['best']:.3f} s best, {p['cpu_work']['median']:.3f} s median")
    if before:
        b = result["before"]
        print(f"polyprof --before   load {b['load']['best']:.3f} s + summary {b['summary']['best']:.3f} s = work "
              f"{b['work']['best']:.3f} s best, {b['work']['median']:.3f} s median; its load / this load: best "
              f"{b['load_ratio']['best']:.1f}x, paired median {b['load_ratio']['paired_median']:.1f}x")
        print(f"  CPU: load {b['cpu_load']['best']:.3f} s + summary {b['cpu_summary']['best']:.3f} s = work "
              f"{b['cpu_work']['best']:.3f} s best, {b['cpu_work']['median']:.3f} s median")
    for tool in TOOLS:
        x = result[tool]
        rw, rp = x["ratio_work"], x["ratio_process"]
        print(f"xprof {tool:<18} work {x['work']['best']:.3f} s best, {x['work']['median']:.3f} s median; process "
              f"{x['process']['best']:.2f} s best, {x['process']['median']:.2f} s median (import "
              f"{x['import']['best']:.2f} s)")
        print(f"  ratio xprof/polyprof: work best {rw['best']:.2f}x, median {rw['median']:.2f}x (paired: median "
              f"{rw['paired_median']:.2f}x, lowest {rw['paired_min']:.2f}x); process best {rp['best']:.2f}x, median "
              f"{rp['median']:.2f}x (paired median {rp['paired_median']:.2f}x, lowest {rp['paired_min']:.2f}x)")
        rc = x["ratio_cpu_work"]
        print(f"  CPU: work {x['cpu_work']['best']:.3f} s best, {x['cpu_work']['median']:.3f} s median; ratio "
              f"xprof/polyprof best {rc['best']:.2f}x, median {rc['median']:.2f}x (paired: median "
              f"{rc['paired_median']:.2f}x, lowest {rc['paired_min']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
