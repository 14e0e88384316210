"""Many-rank benchmark: polyprof's multi-rank summary against HTA's multi-rank
``TraceAnalysis``, on N ranks made by replicating a real trace (issue 12).

Ranks: ``tests/data/traces/kineto/a100_nccl_rank0.json.gz`` (NCCL collectives, 27k
events) copied N times with ``distributedInfo.rank`` set, each rank's clock shifted by a
few ms and one rank late at its collectives (tests/rankmaker.py), so alignment and
straggler detection do real work.

Each round runs both tools in fresh child processes, alternating which goes first:

* polyprof: ``polyprof summary DIR --json`` (what a user runs: every per-rank analysis
  in worker processes, one per core by default, plus alignment, collective statistics,
  stragglers and findings).
* polyprof, same analyses: ``polyprof.load_ranks(DIR).analyze(tables=(...))`` with
  HTA's three breakdowns only (plus alignment, collectives and stragglers, which
  ``analyze`` always does), in worker processes as above.
* HTA: ``TraceAnalysis(trace_dir=DIR)`` (its parse, which also uses a process pool),
  then ``get_temporal_breakdown``, ``get_comm_comp_overlap`` and
  ``get_gpu_kernel_breakdown`` (``visualize=False``).

Time is wall time of the child, run bare; memory is the peak of the summed PSS
(proportional set size: a page shared by n processes counts 1/n in each) of the child and
all its descendants, plus the ranks polyprof read ahead waiting in /dev/shm (tmpfs pages
no process's PSS counts), sampled every 20 ms with psutil in a second run of the same command
right after (the sampling takes CPU that the timed run should not lose). Both tools use
worker processes, so the child's own peak would flatter both, and summed RSS would count
the pages that forked workers share with their parent once per worker. Ratios HTA / polyprof for time and
polyprof / HTA for memory: best, median, and round by round.

    python bench/ranks.py                       # 8 and 32 ranks, 3 rounds
    python bench/ranks.py --ranks 8 --repeat 5 --json
    python bench/ranks.py --ranks 8 --baseline /path/to/other/src --no-hta   # before/after, same rounds

``--baseline SRC`` adds that source tree's ``polyprof summary DIR --json``
(``polyprof_baseline``) and its store (``polyprof convert`` then ``summary STORE
--json``, both trees) to every round, alternating with the rest, and prints this tree's
time over the baseline's (min and median, and round by round).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
sys.path.insert(0, str(ROOT / "tests"))

_POLYPROF_SAME = r"""
import sys, logging
logging.disable(logging.CRITICAL)
import polyprof
import numpy as np
rep = polyprof.load_ranks(sys.argv[1]).analyze(tables=("temporal_breakdown", "comm_comp_overlap", "kernel_breakdown"))
assert len(np.unique(np.asarray(rep.tables["temporal_breakdown"]["rank"]))) == len(rep.ranks)
"""

_HTA = r"""
import sys, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
"""


def measure(cmd: list[str], env: dict[str, str]) -> dict:
    """Wall seconds of a bare run, and the peak summed PSS (MB) of the command and its
    descendants in a second, sampled run (the sampler's /proc scans every 20 ms take
    CPU from the 2 cores, so they stay out of the timed run)."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-2000:]}")
    return {"s": wall, "mb": peak_pss(cmd, env)}


def peak_pss(cmd: list[str], env: dict[str, str]) -> float:
    """Peak summed PSS (MB) of a command and its descendants, plus the files polyprof's
    reading ahead keeps in memory (``/dev/shm/polyprof-prefetch-*``: tmpfs pages, in no
    process's PSS), sampled every 20 ms."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    proc = psutil.Process(p.pid)
    peak = 0
    while p.poll() is None:
        try:
            procs = [proc, *proc.children(recursive=True)]
            rss = _prefetch_bytes()
            for q in procs:
                try:
                    rss += q.memory_full_info().pss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({p.returncode}): {err[-2000:]}")
    return peak / 2**20


def _prefetch_bytes() -> int:
    total = 0
    for folder in glob.glob("/dev/shm/polyprof-prefetch-*"):
        try:
            with os.scandir(folder) as it:
                total += sum(e.stat().st_size for e in it)
        except OSError:  # removed meanwhile
            pass
    return total


def ratios(a: list[float], b: list[float]) -> dict:
    pairs = [x / y for x, y in zip(a, b)]
    return {"best": min(a) / min(b), "median": statistics.median(a) / statistics.median(b),
            "round_median": statistics.median(pairs), "round_min": min(pairs)}


def bench(n: int, repeat: int, hta_python: str, jobs: int | None, baseline: str | None = None,
          hta: bool = True) -> dict:
    from rankmaker import make_ranks

    with tempfile.TemporaryDirectory(prefix=f"polyprof-ranks{n}-") as d:
        data = Path(d) / "ranks"
        offsets = [((r * 7919) % 13 - 6) * 1_000_000 + r * 137 for r in range(n)]
        make_ranks(SOURCE, data, offsets, {n // 2: 300.0}, jitter_us=10.0)
        env = child_env(str(ROOT / "src"))
        j = ["-j", str(jobs)] if jobs else []
        pp = [sys.executable, "-m", "polyprof", "summary", str(data), "--json", *j]
        same = [sys.executable, "-c", _POLYPROF_SAME, str(data)]
        tools = [("polyprof", pp, env), ("polyprof_same", same, env)]
        if hta:
            tools.append(("hta", [hta_python, "-c", _HTA, str(data)], env))
        if baseline:
            base_env = child_env(baseline)
            tools.append(("polyprof_baseline", pp, base_env))
            for name, e in (("store", env), ("store_baseline", base_env)):
                store = Path(d) / name
                subprocess.run([sys.executable, "-m", "polyprof", "convert", *map(str, sorted(data.iterdir())),
                                "-o", str(store)], env=e, check=True, capture_output=True)
                tools.append((f"polyprof_{name}", [sys.executable, "-m", "polyprof", "summary", str(store), "--json",
                                                   *j], e))
        for _, cmd, e in tools:  # warm-up (bytecode, page cache), untimed
            measure(cmd, e)
        rounds = []
        for i in range(repeat):
            order = tools if i % 2 == 0 else tools[::-1]
            r = {name: measure(cmd, e) for name, cmd, e in order}
            rounds.append(r)
            print(f"  {n} ranks, round {i + 1}: " + "; ".join(
                f"{k} {v['s']:.2f} s {v['mb']:.0f} MB" for k, v in r.items()), file=sys.stderr)
    out: dict = {"ranks": n, "rounds": rounds}
    for now, before in (("polyprof", "polyprof_baseline"), ("polyprof_store", "polyprof_store_baseline")):
        if before in rounds[0]:
            t_a, t_b = [r[now]["s"] for r in rounds], [r[before]["s"] for r in rounds]
            m_a, m_b = [r[now]["mb"] for r in rounds], [r[before]["mb"] for r in rounds]
            out[f"{now}_vs_baseline"] = {"time": ratios(t_a, t_b), "memory": ratios(m_a, m_b)}
    if not hta:
        return out
    t_h = [r["hta"]["s"] for r in rounds]
    m_h = [r["hta"]["mb"] for r in rounds]
    out["hta_s"] = {"best": min(t_h), "median": statistics.median(t_h)}
    out["hta_mb"] = {"best": min(m_h), "median": statistics.median(m_h)}
    for tool in ("polyprof", "polyprof_same"):
        t_p = [r[tool]["s"] for r in rounds]
        m_p = [r[tool]["mb"] for r in rounds]
        out[tool] = {"s": {"best": min(t_p), "median": statistics.median(t_p)},
                     "mb": {"best": min(m_p), "median": statistics.median(m_p)},
                     "speedup": ratios(t_h, t_p), "memory_ratio": ratios(m_p, m_h)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="polyprof's -j (default: one worker per core)")
    ap.add_argument("--hta-python", default=os.environ.get("POLYPROF_HTA_PYTHON", sys.executable),
                    help="interpreter with holistictraceanalysis installed (default: this one)")
    ap.add_argument("--baseline", metavar="SRC", help="another polyprof source tree to time against, paired")
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out (with --baseline: before/after only)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores", file=sys.stderr)
    results = [bench(n, args.repeat, args.hta_python, args.jobs, args.baseline, not args.no_hta) for n in args.ranks]
    print(f"load {os.getloadavg()[0]:.1f} at the end", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        for now in ("polyprof", "polyprof_store"):
            v = r.get(f"{now}_vs_baseline")
            if v:
                t, m = v["time"], v["memory"]
                print(f"{r['ranks']:>3} ranks, {now} / baseline: time {t['best']:.3f}x min, {t['median']:.3f}x "
                      f"median, {t['round_median']:.3f}x round by round; memory {m['median']:.3f}x median")
        if "hta" not in r["rounds"][0]:
            continue
        for tool in ("polyprof", "polyprof_same"):
            t = r[tool]
            s, m = t["speedup"], t["memory_ratio"]
            print(f"{r['ranks']:>3} ranks, {tool}: {t['s']['best']:.2f}/{t['s']['median']:.2f} s (best/median), "
                  f"HTA {r['hta_s']['best']:.2f}/{r['hta_s']['median']:.2f} s -> {s['best']:.1f}x best, "
                  f"{s['median']:.1f}x median, {s['round_median']:.1f}x round by round; memory "
                  f"{t['mb']['median']:.0f} MB vs HTA {r['hta_mb']['median']:.0f} MB -> {m['median']:.2f}x "
                  f"(best {m['best']:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
