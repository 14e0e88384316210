"""torch.compile recompiles when the batch size changes at step 4 (dynamic=False), under
torch.profiler: ``python recompile_cpu.py OUT.json`` (then gzip it)."""

import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
torch.set_num_threads(1)
m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
cm = torch.compile(m, dynamic=False)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=8)) as prof:
    for i in range(7):
        x = torch.randn(16 if i < 4 else 24, 64)
        opt.zero_grad()
        cm(x).sum().backward()
        opt.step()
        prof.step()
prof.export_chrome_trace(sys.argv[1])
