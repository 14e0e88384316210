"""Stop + collect of the torch plugin against torch.profiler's own stop, for the same
recorded ranges, alternating round by round in one process.

Each round runs the same small CPU training loop (MLP, 3 sections per step) four ways
and times only what happens after the loop:
  torch            torch.profiler.profile: stop() + export_chrome_trace() (torch's trace file)
  torch, stop      the same, stop() alone (torch keeps its results in memory)
  torch, trace_only  stop() + export_chrome_trace() with torch 2.13's trace_only (no
                   per-op Python events built at stop: torch at its cheapest, what the
                   plugin asks torch for)
  polyprof         polyprof.profile(), the default session as users get it (every
                   available plugin: host, torch, and OpenCL where PoCL is installed):
                   session stop, which returns the Trace (torch's stop, reading its
                   results, clock fit, merge, every plugin's stop and collect)
  polyprof, file   the same session with output=...polyprof: stop + writing the file
Before each timed stop, every mode collects the garbage earlier rounds left: a torch
profiler from an earlier round, freed by a collection the next stop's allocations
trigger, cost 10-18 ms inside polyprof's timed stop (seen with gc.callbacks).
Reports min and median of the per-round ratios polyprof / torch and polyprof / torch stop,
and polyprof, file / torch (a file each).

    PYTHONPATH=$PWD/src python bench/torch_stop.py --steps 50 --rounds 9 [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import tempfile
import time

import torch

import polyprof
from torch_workload import training_loop

logging.disable(logging.WARNING)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    loop = training_loop(a.steps, a.width)
    tmp = tempfile.mkdtemp(prefix="polyprof-torchstop-")

    rf = torch.profiler.record_function  # torch's own ranges for the same sections

    def torch_only(export: bool, trace_only: bool = False) -> tuple[float, int]:
        kw = {}
        if trace_only:
            kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(trace_only=True)
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw)
        p.start()
        loop(rf)
        gc.collect()  # no earlier round's garbage collected inside the timed stop
        t0 = time.perf_counter()
        p.stop()
        if export:
            p.export_chrome_trace(os.path.join(tmp, "t.json"))
        return time.perf_counter() - t0, len(p.profiler.kineto_results.trace_activities())

    def with_polyprof(output: str | None) -> tuple[float, int]:
        s = polyprof.profile(output=output, options={"host": {"sample_interval_s": 0}})
        s.start()
        loop(polyprof.section)
        gc.collect()  # as for torch
        t0 = time.perf_counter()
        t = s.stop()
        took = time.perf_counter() - t0
        plugins = t.metadata["plugins"]
        if plugins.get("torch") != "ok" or plugins.get("host") != "ok":
            raise SystemExit(f"the default session did not record torch: {plugins}")
        seen_plugins.update(k for k, v in plugins.items() if v == "ok")
        return took, t.n_events

    out_file = os.path.join(tmp, "run.polyprof")
    seen_plugins: set[str] = set()
    modes = {"torch": lambda: torch_only(True), "torch, stop": lambda: torch_only(False),
             "torch, trace_only": lambda: torch_only(True, trace_only=True),
             "polyprof": lambda: with_polyprof(None), "polyprof, file": lambda: with_polyprof(out_file)}
    for fn in modes.values():  # warm up
        fn()
    runs: dict[str, list[tuple[float, int]]] = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m, fn in modes.items():
            runs[m].append(fn())
    out: dict[str, object] = {"steps": a.steps, "rounds": a.rounds, "load": os.getloadavg(), "torch": torch.__version__}
    for m, rs in runs.items():
        out[m] = {"min_ms": min(r[0] for r in rs) * 1e3, "median_ms": statistics.median(r[0] for r in rs) * 1e3,
                  "events": rs[-1][1]}
    pairs = (("polyprof", "torch"), ("polyprof", "torch, stop"), ("polyprof", "torch, trace_only"),
             ("polyprof, file", "torch"))
    for mine, base in pairs:
        ratios = [p[0] / b[0] for p, b in zip(runs[mine], runs[base])]
        out[f"{mine} / {base}"] = {"min": min(ratios), "median": statistics.median(ratios)}
    out["plugins"] = sorted(seen_plugins)
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{a.steps} steps, {a.rounds} rounds alternating, torch {torch.__version__}, load {os.getloadavg()[0]:.2f}")
    for m in modes:
        v = out[m]
        assert isinstance(v, dict)
        print(f"{m:<18} min {v['min_ms']:8.1f} ms  median {v['median_ms']:8.1f} ms  ({v['events']} events)")
    print(f"polyprof: the default session, plugins {', '.join(out['plugins'])}")  # type: ignore[arg-type]
    for mine, base in pairs:
        r = out[f"{mine} / {base}"]
        assert isinstance(r, dict)
        print(f"{mine + ' / ' + base:<30} min x{r['min']:.2f}  median x{r['median']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
