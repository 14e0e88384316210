import json
import os
import time

import torch
import torch.distributed as dist

import polyprof

dist.init_process_group("gloo")
r = dist.get_rank()
w = dist.get_world_size()
SLOW = [int(v) for v in os.environ.get("SLOW_RANK", "1").split(",")]
SLEEP = float(os.environ.get("SLEEP_MS", "40")) / 1e3
x = torch.randn(256, 256)
t = torch.ones(1 << 16)
log = []
for step in range(8):
    with polyprof.step():
        y = x @ x
        if r in SLOW and step >= 2:
            time.sleep(SLEEP)
        a = time.perf_counter_ns()
        dist.all_reduce(t)
        b = time.perf_counter_ns()
        log.append((step, a, b))
with open(f"truth.rank{r}.json.txt", "w") as f:
    json.dump(log, f)
dist.destroy_process_group()
