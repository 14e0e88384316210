"""Small torch CPU training loop with sections (the program of the recordings beside it,
as the auditor ran it under `polyprof run`; reformatted only). Environment switches:

  BIG=1     the second matmul (mm2) twice the flops (its k dimension doubled)
  SLEEP_MS  extra sleep inside the section `load`
  EXTRA=1   an added op (torch.sort) inside `compute`
  DROP=1    no tanh
  STEPS     the number of steps (default 30)
  TIMES     a JSON file for the program's own per-step timings
"""

import json
import os
import time

import torch

import polyprof

torch.set_num_threads(1)
torch.manual_seed(0)
STEPS = int(os.environ.get("STEPS", "30"))
BIG = os.environ.get("BIG") == "1"
SLEEP = float(os.environ.get("SLEEP_MS", "0")) / 1000
EXTRA = os.environ.get("EXTRA") == "1"
DROP = os.environ.get("DROP") == "1"
N = 192
a = torch.randn(N, N)
b = torch.randn(N, N)
c = torch.randn(N, 2 * N if BIG else N)
times: dict[str, list[float]] = {"step": [], "mm2": [], "load": [], "sort": [], "tanh": []}
for _ in range(STEPS):
    t0 = time.perf_counter()
    with polyprof.section("load"):
        tl = time.perf_counter()
        time.sleep(0.001 + SLEEP)
        x = torch.randn(N, N)
        times["load"].append(time.perf_counter() - tl)
    with polyprof.section("compute"):
        y = torch.mm(x, a)
        if not DROP:
            tt = time.perf_counter()
            y = torch.tanh(y)
            times["tanh"].append(time.perf_counter() - tt)
        t2 = time.perf_counter()
        z = torch.matmul(y, c)  # aten::matmul -> aten::mm
        times["mm2"].append(time.perf_counter() - t2)
        if EXTRA:
            ts = time.perf_counter()
            torch.sort(z.flatten())
            times["sort"].append(time.perf_counter() - ts)
        z.sum().item()
    polyprof.step()
    times["step"].append(time.perf_counter() - t0)
if os.environ.get("TIMES"):
    with open(os.environ["TIMES"], "w") as f:
        json.dump(times, f)
