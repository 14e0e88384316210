"""FLOPs and MFU against a known matrix product, and a ``torch.compile`` program with
CUDA graphs, on a real NVIDIA GPU: one command.

    python scripts/gpu_compile_mfu.py OUTDIR [mm] [compile] [train]   # after gpu_session.sh's set-up

1. bf16 8192 x 8192 x 8192 products, 10 per step over 5 steps, under torch.profiler
   (``record_shapes``): the truth is 2 * 8192**3 FLOPs per product and the products'
   time by CUDA events around the same loop outside the profiler;
2. an MLP under ``torch.compile(mode="reduce-overhead")`` (Inductor's Triton kernels
   replayed as CUDA graphs, recorded in the first calls) for 8 steps under
   torch.profiler, and the same program under ``polyprof run`` (the cupti plugin);
3. its training step (forward and backward graphs), 8 steps under torch.profiler.

OUTDIR keeps the traces and ``compile_truth.json``; this prints polyprof's mfu,
op_efficiency, cuda_graphs and launch counts beside the truth. Exit status 1 when the
FLOPs differ from the truth.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from gpu_memory_copies import run, summary, table as records  # this script's sibling (scripts/ is on sys.path)

MM_PROGRAM = textwrap.dedent('''
    import json, sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    out = sys.argv[1]
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        c = a @ b
    end.record(); torch.cuda.synchronize()
    plain_ms = start.elapsed_time(end)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=0, active=6)) as prof:
        for _ in range(5):
            for _ in range(10):
                c = a @ b
            torch.cuda.synchronize()
            prof.step()
    prof.export_chrome_trace(out + "/torch_bf16_mm_h200.json")
    json.dump({"products": 50, "flops": 50 * 2 * n ** 3, "plain_ms_for_50": plain_ms,
               "torch": torch.__version__}, open(out + "/mm_truth.json", "w"), indent=1)
''')

COMPILE_PROGRAM = textwrap.dedent('''
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    out, mode = sys.argv[1], sys.argv[2]
    m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024),
                            torch.nn.LayerNorm(1024)).cuda()
    f = torch.compile(m, mode="reduce-overhead")
    x = torch.randn(256, 1024, device="cuda")
    with torch.no_grad():
        f(x); torch.cuda.synchronize()                     # the compile itself, outside the record
        if mode == "profile":
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                         schedule=schedule(wait=0, warmup=0, active=9)) as prof:
                for _ in range(8):
                    y = f(x).sum().item()
                    prof.step()
            prof.export_chrome_trace(out + "/torch_compile_h200.json")
        else:
            for _ in range(8):
                y = f(x).sum().item()
''')


TRAIN_PROGRAM = textwrap.dedent('''
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    out = sys.argv[1]
    m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    f = torch.compile(m, mode="reduce-overhead")
    x = torch.randn(256, 1024, device="cuda")

    def step():
        loss = f(x).square().mean()
        loss.backward()
        for p in m.parameters():
            p.grad = None
        return loss

    step(); torch.cuda.synchronize()                       # the compile, outside the record
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=0, active=9)) as prof:
        for _ in range(8):
            step().item()
            prof.step()
    prof.export_chrome_trace(out + "/torch_compile_train_h200.json")
''')
#: the train step's products: forward 2 x (256x1024x4096), the weights' gradients as many,
#: the hidden layer's input gradient one more (x needs none)
TRAIN_FLOPS = 5 * 2 * 256 * 1024 * 4096


def show(doc: dict, label: str) -> None:
    print(f"== {label}")
    print("overview:", json.dumps(doc.get("overview", {}))[:1500])
    for t in ("mfu", "op_efficiency", "kernel_efficiency", "cuda_graphs", "launch_summary", "step_stats"):
        for r in records(doc, t)[:4]:
            print(t, json.dumps(r)[:400])
    print("findings:", [(f["id"], f["title"]) for f in doc.get("findings", [])])


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_compile").resolve()
    parts = set(sys.argv[2:]) or {"mm", "compile", "train"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "mm.py").write_text(MM_PROGRAM)
    (out / "compiled.py").write_text(COMPILE_PROGRAM)
    ok = True
    if "mm" not in parts:
        pass
    elif run([sys.executable, str(out / "mm.py"), str(out)]):
        subprocess.run(["gzip", "-f", str(out / "torch_bf16_mm_h200.json")], check=False)
        truth = json.loads((out / "mm_truth.json").read_text())
        doc = summary(out / "torch_bf16_mm_h200.json.gz")
        show(doc, f"bf16 products; truth {truth}")
        mm = [r for r in records(doc, "op_efficiency") if r["name"] == "aten::mm"]
        ok &= bool(mm) and mm[0]["flops"] == truth["flops"]
        print("aten::mm FLOPs", mm[0]["flops"] if mm else None, "truth", truth["flops"])
    else:
        ok = False
    if "compile" in parts and run([sys.executable, str(out / "compiled.py"), str(out), "profile"]):
        subprocess.run(["gzip", "-f", str(out / "torch_compile_h200.json")], check=False)
        show(summary(out / "torch_compile_h200.json.gz"), "torch.compile reduce-overhead, torch.profiler")
    if "compile" in parts and run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o",
                                   str(out / "torch_compile_cupti.polyprof"), str(out / "compiled.py"), str(out), "plain"]):
        show(summary(out / "torch_compile_cupti.polyprof"), "torch.compile reduce-overhead, polyprof run")
    (out / "train.py").write_text(TRAIN_PROGRAM)
    if "train" in parts and run([sys.executable, str(out / "train.py"), str(out)]):
        subprocess.run(["gzip", "-f", str(out / "torch_compile_train_h200.json")], check=False)
        doc = summary(out / "torch_compile_train_h200.json.gz")
        show(doc, f"torch.compile train step, reduce-overhead; truth {TRAIN_FLOPS} FLOPs a step")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
