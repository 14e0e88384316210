"""Where the default session's stop goes, phase by phase, with the torch plugin recording
(the loop of bench/torch_stop.py): torch's own stop, reading its results, the Kineto
collector and builder, the plugin's collect (clock fit, mirrored sections, re-homing),
the host and OpenCL plugins, the session's merge, and any thread hand-off.

Each phase is timed with perf_counter stamps around the function that does it (wrapped
in this process only); a phase's time includes the phases inside it. Round 0 is a
warm-up. Reports min and median over the rounds, per round, in ms; torch's own stop +
export of the same loop (record_function ranges) alternates with it as the reference.

    PYTHONPATH=$PWD/src python bench/torch_stop_phases.py --rounds 12
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import statistics
import tempfile
import time
from typing import Any, Callable

import torch

import polyprof
from polyprof.collect import session
from polyprof.formats.kineto import collector
from polyprof.plugins.opencl import plugin as opencl_plugin
from polyprof.plugins.torch import activities, ingest, plugin as torch_plugin
from torch_workload import training_loop

logging.disable(logging.WARNING)
TIMES: dict[str, list[float]] = {}

#: (owner, attribute, phase name), outermost first
PHASES: list[tuple[Any, str, str]] = [
    (session.Session, "_stop_all", "session stop (all)"),
    (torch_plugin.TorchPlugin, "_stop", "torch plugin stop"),
    (torch.profiler.profile, "stop", "  torch's own stop (trace_only)"),
    (torch_plugin.TorchPlugin, "_keep", "  read torch's results"),
    (activities, "read", "    activities.read"),
    (collector._Collector, "add_columns", "      collector columns"),
    (activities, "_flows", "      flow endpoints"),
    (collector._Collector, "finish", "      build"),
    (session.Session, "_collect", "collects (all plugins)"),
    (torch_plugin.TorchPlugin, "_collect", "  torch plugin collect"),
    (ingest, "fit_alignment", "    clock fit"),
    (ingest, "_mirror_rows", "    mirrored sections"),
    (ingest, "_refit", "    clock refit"),
    (ingest, "_copy_rows", "    re-homing"),
    (opencl_plugin.OpenCLPlugin, "_stop", "opencl stop"),
    (opencl_plugin.OpenCLPlugin, "_collect", "opencl collect"),
    (session.Session, "_assemble", "session merge"),
    (session, "call_guarded", "calls in helper threads, work incl."),
]


def _timed(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            TIMES.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    for owner, attr, name in PHASES:
        setattr(owner, attr, _timed(getattr(owner, attr), name))
    loop = training_loop(a.steps)
    out = os.path.join(tempfile.mkdtemp(prefix="polyprof-phases-"), "t.json")

    per_round: list[dict[str, float]] = []
    torch_ms: list[float] = []
    for _ in range(a.rounds + 1):
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        p.start()
        loop(torch.profiler.record_function)
        gc.collect()
        t0 = time.perf_counter()
        p.stop()
        p.export_chrome_trace(out)
        torch_ms.append((time.perf_counter() - t0) * 1e3)
        s = polyprof.profile(options={"host": {"sample_interval_s": 0}})
        s.start()
        loop(polyprof.section)
        gc.collect()
        TIMES.clear()
        s.stop()
        per_round.append({k: sum(v) for k, v in TIMES.items()})
    per_round, torch_ms = per_round[1:], torch_ms[1:]
    print(f"{a.steps} steps, {a.rounds} rounds, torch {torch.__version__}, load {os.getloadavg()[0]:.2f}; ms min / median")
    print(f"{'torch: stop + export (reference)':<34} {min(torch_ms):7.2f} {statistics.median(torch_ms):7.2f}")
    for _, _, name in PHASES:
        vals = [r.get(name, 0.0) for r in per_round]
        print(f"{name:<34} {min(vals):7.2f} {statistics.median(vals):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
