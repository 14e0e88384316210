"""A real torch.profiler CPU run written as a trace: for the diff tests, which compare
runs that differ in their matmuls' size or count."""

from __future__ import annotations

from pathlib import Path


def matmul_run(torch, path: Path, size: int, steps: int, calls: int) -> Path:
    """torch.profiler's CPU trace at ``path``: ``steps`` recorded steps (after one warm-up),
    each a ``work`` range of ``calls`` matmuls of ``size`` x ``size``."""
    torch.manual_seed(0)
    x = torch.randn(size, size)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(steps + 1):
            with torch.profiler.record_function("work"):
                for _ in range(calls):
                    torch.mm(x, x)
            prof.step()
    return path
