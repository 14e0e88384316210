"""torch.profiler-native 4-rank gloo job: world bcast from 0, subgroup [1,3] bcast from 3, reduce to 2 (unless NOREDUCE), allreduce.
Rank 3 sleeps 40 ms BEFORE THE WORLD broadcast in steps 4 and 6. Truth: OUT/slept{r}.json.
(The program the recordings were made with, its statements one a line.)"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
noreduce = os.environ.get("NOREDUCE") == "1"
dist.init_process_group("gloo")
r = dist.get_rank()
g = dist.new_group([1, 3])
t, w, big, red = torch.zeros(16), torch.zeros(8), torch.ones(1 << 15), torch.ones(2048)
for _ in range(2):
    dist.broadcast(w, src=0)
    dist.all_reduce(big)
    if r in (1, 3):
        dist.broadcast(t, src=3, group=g)
    dist.reduce(red, dst=2)
dist.barrier()
slept = []


def export(p):
    p.export_chrome_trace(os.path.join(out, f"rank{r}.pt.trace.json"))


with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=6),
             on_trace_ready=export) as prof:
    for step in range(8):
        if r == 3 and step in (4, 6):
            t0 = time.perf_counter_ns()
            time.sleep(0.04)
            slept.append((step, time.perf_counter_ns() - t0))
        dist.broadcast(w, src=0)
        if r in (1, 3):
            dist.broadcast(t, src=3, group=g)
        if not noreduce:
            dist.reduce(red, dst=2)
        dist.all_reduce(big)
        prof.step()
json.dump(slept, open(os.path.join(out, f"slept{r}.json"), "w"))
dist.destroy_process_group()
