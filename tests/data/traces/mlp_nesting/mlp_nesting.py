"""Records tests/data/traces/mlp_nesting: a two-layer MLP's forward (its first layer in
record_function "block") and backward under torch.profiler on the CPU, one thread,
pinned to one CPU; A's hidden layer 256 wide (narrow.json.gz), B's 1024 (wide.json.gz).

    python mlp_nesting.py
"""

import gzip
import os
import shutil
import sys

import torch

if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
torch.set_num_threads(1)


def record(path: str, width: int, steps: int = 8) -> None:
    torch.manual_seed(0)
    l1, l2 = torch.nn.Linear(256, width), torch.nn.Linear(width, 10)
    x = torch.randn(128, 256)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(steps + 1):
            with torch.profiler.record_function("block"):
                h = torch.relu(l1(x))
            l2(h).sum().backward()
            prof.step()
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as out:
        shutil.copyfileobj(f, out)
    os.unlink(path)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    record(os.path.join(here, "narrow.json"), 256)
    record(os.path.join(here, "wide.json"), 1024)
