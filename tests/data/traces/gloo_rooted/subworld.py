"""subworld.rank0-3 / subworld_late1.rank0-3: 4 gloo ranks under torchrun, recorded by
torch.profiler (record_shapes) and exported as Kineto JSON (see README.md).

Each step: a world broadcast from rank 0, a broadcast in group [1, 3] from rank 3 (its
group rank 1, the ``root_rank`` the c10d op names), a world all-reduce. Rank LATE sleeps
25 ms before the subgroup broadcast (before the world one if LATE is not in the group)
in steps 4 and 6 (of the 6 recorded, 2-7).

    LATE=3 torchrun --nproc-per-node 4 --master-addr 127.0.0.1 subworld.py OUT
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

out, late = sys.argv[1], int(os.environ.get("LATE", "3"))
dist.init_process_group("gloo")
r = dist.get_rank()
g = dist.new_group([1, 3])
t, w, big = torch.zeros(16), torch.zeros(8), torch.ones(1 << 15)
for _ in range(2):  # warm-up: every group's connections made before the recording
    dist.broadcast(w, src=0)
    dist.all_reduce(big)
    if r in (1, 3):
        dist.broadcast(t, src=3, group=g)
dist.barrier()
slept = []


def export(p) -> None:
    p.export_chrome_trace(os.path.join(out, f"rank{r}.pt.trace.json"))


def sleep(step: int) -> None:
    t0 = time.perf_counter_ns()
    time.sleep(0.025)
    slept.append((step, time.perf_counter_ns() - t0))


with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=6),
             on_trace_ready=export) as prof:
    for step in range(8):
        if r == late and step in (4, 6) and r not in (1, 3):
            sleep(step)
        dist.broadcast(w, src=0)
        if r == late and step in (4, 6) and r in (1, 3):
            sleep(step)
        if r in (1, 3):
            dist.broadcast(t, src=3, group=g)
        dist.all_reduce(big)
        prof.step()
with open(os.path.join(out, f"slept{r}.json"), "w") as f:
    json.dump(slept, f)  # the truth: (step, ns slept)
dist.destroy_process_group()
