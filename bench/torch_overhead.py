"""What profiling a PyTorch loop through polyprof costs, next to torch.profiler alone.

One process, torch warmed up first; each mode runs the same small CPU training loop
(MLP, SGD, 3 polyprof sections per step) ``--steps`` times, ``--repeat`` rounds (modes interleaved), best
run kept. Reports per-step time while recording, the time to stop + build the trace
(torch: stop + export_chrome_trace; polyprof: session stop = export + Kineto read +
alignment + merge), the number of torch events, and the alignment uncertainty. With
memory on (``polyprof.profile(memory=True)``, i.e. ``polyprof run --memory``) next to
torch.profiler's own ``profile_memory=True``; the ratio of the two, round by round.

    python bench/torch_overhead.py --steps 50 --repeat 5
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

import torch

import polyprof
import polyprof.torch as ptorch
from polyprof.trace.metadata_keys import plugin_fit

logging.disable(logging.WARNING)


def loop(model, opt, x, y, steps: int, on_step) -> None:
    for _ in range(steps):
        with polyprof.section("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        with polyprof.section("backward"):
            opt.zero_grad()
            loss.backward()
        with polyprof.section("optimizer"):
            opt.step()
        on_step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--width", type=int, default=256)
    args = ap.parse_args()
    torch.manual_seed(0)
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w),
                                torch.nn.ReLU(), torch.nn.Linear(w, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, w), torch.randn(64, 1)
    quiet = {"host": {"sample_interval_s": 0}}
    tmp = tempfile.mkdtemp()

    def plain():
        t0 = time.perf_counter()
        loop(model, opt, x, y, args.steps, lambda: None)
        return time.perf_counter() - t0, 0.0, 0, None

    def torch_only(memory: bool = False):
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=memory)
        p.start()
        t0 = time.perf_counter()
        loop(model, opt, x, y, args.steps, lambda: None)
        t1 = time.perf_counter()
        p.stop()
        path = os.path.join(tmp, "t.json")
        p.export_chrome_trace(path)
        return t1 - t0, time.perf_counter() - t1, 0, None

    def polyprof_plugin(memory: bool = False):
        s = polyprof.profile(plugins=["torch"], options=quiet, memory=memory)
        s.start()
        t0 = time.perf_counter()
        loop(model, opt, x, y, args.steps, polyprof.step)
        t1 = time.perf_counter()
        t = s.stop()
        return t1 - t0, time.perf_counter() - t1, t.n_events, plugin_fit(t.metadata, "torch").get("uncertainty_ns")

    def polyprof_dropin():
        p = ptorch.profile(activities=[torch.profiler.ProfilerActivity.CPU], polyprof_options=quiet)
        p.start()
        t0 = time.perf_counter()
        loop(model, opt, x, y, args.steps, p.step)
        t1 = time.perf_counter()
        p.stop()
        t = p.trace
        return t1 - t0, time.perf_counter() - t1, t.n_events, plugin_fit(t.metadata, "torch").get("uncertainty_ns")

    plain()  # warm up
    modes = [("no profiler", plain), ("torch.profiler", torch_only),
             ("polyprof torch plugin", polyprof_plugin), ("polyprof.torch.profile", polyprof_dropin),
             ("torch, profile_memory", lambda: torch_only(True)),
             ("polyprof, memory=True", lambda: polyprof_plugin(True))]
    print(f"{args.steps} steps, MLP width {w}, batch 64, torch {torch.__version__}, best of {args.repeat}")
    print(f"{'mode':<24}{'ms/step':>10}{'median':>9}{'stop+build ms':>15}{'events':>9}{'align ±µs':>11}")
    base = None
    results: dict[str, list] = {name: [] for name, _ in modes}
    for _ in range(args.repeat):  # round-robin, so load changes hit every mode alike
        for name, fn in modes:
            results[name].append(fn())
    for name, _ in modes:
        runs = results[name]
        rec, fin, n, unc = min(runs, key=lambda r: r[0])
        fin = min(r[1] for r in runs)
        per = rec / args.steps * 1e3
        med = sorted(r[0] for r in runs)[len(runs) // 2] / args.steps * 1e3
        base = base or per
        print(f"{name:<24}{per:>10.3f}{med:>9.3f}{fin * 1e3:>15.1f}{n:>9}"
              f"{'' if unc is None else f'{unc / 1e3:.1f}':>11}   x{per / base:.2f}")
    for ours, theirs in (("polyprof, memory=True", "torch, profile_memory"),
                         ("polyprof, memory=True", "polyprof torch plugin")):
        ratios = sorted(a[0] / b[0] for a, b in zip(results[ours], results[theirs]))
        print(f"{ours} / {theirs}, per-step time round by round: min x{ratios[0]:.2f}, "
              f"median x{ratios[len(ratios) // 2]:.2f}")


def section_cost(n: int = 20000, repeat: int = 5) -> None:
    """Cost of one empty polyprof section (enter + exit): host plugin only, and with
    the torch plugin mirroring it into torch while torch records."""
    quiet = {"host": {"sample_interval_s": 0}}

    def run(plugins, opts):
        with polyprof.profile(plugins=plugins, options=opts):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                with polyprof.section("s"):
                    pass
            return (time.perf_counter_ns() - t0) / n

    cases = [("host only", [], quiet), ("torch plugin, no mirror", ["torch"],
                                         {**quiet, "torch": {"mirror_sections": False}}),
             ("torch plugin (mirrored)", ["torch"], quiet)]
    best = {name: min(run(p, o) for _ in range(repeat)) for name, p, o in cases}
    print(f"\nempty section, enter+exit ({n} per run, best of {repeat})")
    for name, ns in best.items():
        print(f"{name:<26}{ns / 1e3:>8.2f} µs")


if __name__ == "__main__":
    main()
    section_cost()
