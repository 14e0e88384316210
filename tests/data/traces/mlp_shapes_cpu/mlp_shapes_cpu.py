"""A small MLP training loop on the CPU under torch.profiler with record_shapes=True, eager
or under torch.compile: ``python mlp_shapes_cpu.py OUT.json eager|compiled`` (then gzip it)."""

import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
torch.set_num_threads(1)
m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
run = torch.compile(m, dynamic=False) if sys.argv[2] == "compiled" else m
opt = torch.optim.SGD(m.parameters(), lr=0.01)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=1, warmup=1, active=5)) as prof:
    for _ in range(7):  # the first call compiles (a compiled run), outside the active steps
        x = torch.randn(64, 256)
        opt.zero_grad()
        run(x).sum().backward()
        opt.step()
        prof.step()
prof.export_chrome_trace(sys.argv[1])
