"""Inference of a small pre-norm transformer block under ``torch.autocast("cpu",
torch.bfloat16)``, then ``torch.where`` on a bool mask and fp32 data, under torch.profiler
with input shapes: ``python autocast_cpu.py OUT.json`` (then gzip it). Every matrix product
runs in bf16 (the dispatch mode below prints the dtypes they were dispatched with), while
torch records each outer ``aten::linear`` with the fp32 inputs it was called with."""

import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

torch.manual_seed(0)
torch.set_num_threads(1)
D, T, B = 64, 32, 2


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln(x)).view(B, T, 3, 4, D // 4).permute(2, 0, 3, 1, 4)
        x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name in ("aten.mm", "aten.addmm", "aten.bmm", "aten._scaled_dot_product_flash_attention_for_cpu"):
            key = (name, tuple(sorted({str(a.dtype) for a in args if isinstance(a, torch.Tensor)})))
            self.seen[key] = self.seen.get(key, 0) + 1
        return func(*args, **(kwargs or {}))


model = Block().eval()
x = torch.randn(B, T, D)
mask, a, b = torch.rand(1 << 16) > 0.5, torch.randn(1 << 16), torch.randn(1 << 16)
with torch.no_grad(), Seen() as seen, torch.autocast("cpu", dtype=torch.bfloat16):
    model(x)
print("products as dispatched:", seen.seen)
with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    torch.where(mask, a, b)
prof.export_chrome_trace(sys.argv[1])
