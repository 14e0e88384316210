"""CUDA activity from frameworks other than torch, on a real NVIDIA GPU: one command.

    python scripts/gpu_frameworks.py OUTDIR      # after gpu_check_cupti.py's set-up

Each program runs as its own process, as users run them:

1. JAX (a jitted MLP train step, 6 steps) under ``polyprof run`` (the cupti plugin by
   default, no torch anywhere) and, separately, under ``jax.profiler.trace``: kernel
   counts of the recorded steps from both, and polyprof's summary of JAX's own XSpace
   (device work must not read as none);
2. CuPy (elementwise and matmul kernels, a reduction) under ``polyprof run``: kernels
   recorded with their names;
3. torch CUDA graphs: a captured step replayed 5 times under torch.profiler (Kineto),
   read by polyprof: graph launches and the kernels attributed to the replays.

The traces are kept in OUTDIR (small: the tests may take them as fixtures) with a
summary table ``frameworks.md``. Exit status 1 when a check fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}

JAX_PROGRAM = textwrap.dedent('''
    import sys
    import jax, jax.numpy as jnp
    mode, out = sys.argv[1], sys.argv[2]
    def loss(w, x, y):
        h = jnp.tanh(x @ w[0])
        return jnp.mean((h @ w[1] - y) ** 2)
    @jax.jit
    def step(w, x, y):
        g = jax.grad(loss)(w, x, y)
        return [a - 0.01 * b for a, b in zip(w, g)]
    k = jax.random.PRNGKey(0)
    w = [jax.random.normal(k, (512, 1024)), jax.random.normal(k, (1024, 256))]
    x, y = jax.random.normal(k, (256, 512)), jax.random.normal(k, (256, 256))
    w = step(w, x, y); jax.block_until_ready(w)          # compile outside the record
    if mode == "jax":
        jax.profiler.start_trace(out)
    for i in range(6):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = step(w, x, y)
        jax.block_until_ready(w)
    if mode == "jax":
        jax.profiler.stop_trace()
''')

CUPY_PROGRAM = textwrap.dedent('''
    import cupy as cp
    a = cp.random.random((1024, 1024), dtype=cp.float32)
    for _ in range(10):
        a = cp.tanh(a @ a) * 0.5
    s = float(a.sum())
    cp.cuda.Device().synchronize()
''')

GRAPH_PROGRAM = textwrap.dedent('''
    import sys, torch
    from torch.profiler import ProfilerActivity, profile
    out = sys.argv[1]
    m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).cuda()
    x = torch.randn(64, 512, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = m(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            x.copy_(torch.randn(64, 512, device="cuda"))
            g.replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)
''')


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300)
    if r.returncode != 0:
        print(f"failed ({r.returncode}): {' '.join(args)}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}", file=sys.stderr)
    return r


def device_kernels(path: Path) -> tuple[int, set[str]]:
    """(count, distinct names) of the kernels on device planes of the trace at ``path``."""
    import numpy as np

    import polyprof
    from gpu_check_cupti import kernel_rows  # this script's sibling (scripts/ is on sys.path)

    t = polyprof.load(path)
    rows = kernel_rows(t)
    names = {t.strings[i] for i in np.unique(t.events["name"][rows])} if len(rows) else set()
    return len(rows), names


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_frameworks_out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    py, pp = sys.executable, [sys.executable, "-m", "polyprof"]
    rows: list[tuple[str, str, str]] = []
    ok = True
    for name, text in (("jax_program.py", JAX_PROGRAM), ("cupy_program.py", CUPY_PROGRAM),
                       ("graph_program.py", GRAPH_PROGRAM)):
        (out / name).write_text(text)

    # 1. JAX: polyprof's cupti plugin against jax.profiler's own XSpace
    r = run([*pp, "run", "--no-summary", "-o", str(out / "jax_cupti.polyprof"), str(out / "jax_program.py"), "plain", "-"])
    r2 = run([py, str(out / "jax_program.py"), "jax", str(out / "jax_trace")])
    if r.returncode == 0 and r2.returncode == 0:
        n_pp, names_pp = device_kernels(out / "jax_cupti.polyprof")
        xplane = next((out / "jax_trace").rglob("*.xplane.pb"))
        (out / "jax_gpu.xplane.pb").write_bytes(xplane.read_bytes())
        n_jx, names_jx = device_kernels(out / "jax_gpu.xplane.pb")
        # polyprof records the whole program (compilation, autotuning, the first step),
        # JAX's trace the 6 steps: every kernel JAX saw must be among polyprof's
        good = n_pp >= n_jx > 0 and names_jx <= names_pp
        ok &= good
        rows.append(("JAX: kernels (polyprof cupti, whole program / JAX XSpace, 6 steps)", f"{n_pp} / {n_jx}",
                     f"{len(names_pp)} / {len(names_jx)} distinct names; JAX's "
                     f"{'all among polyprof' if names_jx <= names_pp else 'NOT ALL FOUND: ' + str(names_jx - names_pp)}"))
        s = run([*pp, "summary", "--json", str(out / "jax_gpu.xplane.pb")])
        (out / "jax_gpu_summary.json").write_text(s.stdout)
        doc = json.loads(s.stdout or "{}")
        temporal = doc.get("tables", {}).get("temporal_breakdown", {}).get("records", [])
        rows.append(("JAX XSpace summary: temporal breakdown", "ok" if s.returncode == 0 else "FAILED",
                     f"{json.dumps(temporal)[:300]}; {xplane.stat().st_size / 1e6:.2f} MB XSpace"))
        ok &= s.returncode == 0
    else:
        ok = False
        rows.append(("JAX train step", "FAILED", "see stderr"))

    # 2. CuPy under polyprof run
    r = run([*pp, "run", "--no-summary", "-o", str(out / "cupy.polyprof"), str(out / "cupy_program.py")])
    if r.returncode == 0:
        n, names = device_kernels(out / "cupy.polyprof")
        ok &= n > 0
        rows.append(("CuPy: kernels under polyprof run", str(n), ", ".join(sorted(names))[:120]))
    else:
        ok = False
        rows.append(("CuPy", "FAILED", "see stderr"))

    # 3. torch CUDA graphs through Kineto
    r = run([py, str(out / "graph_program.py"), str(out / "torch_cuda_graph.json")])
    if r.returncode == 0:
        s = run([*pp, "summary", "--json", str(out / "torch_cuda_graph.json")])
        (out / "torch_cuda_graph_summary.json").write_text(s.stdout)
        doc = json.loads(s.stdout or "{}")
        recs = doc.get("tables", {}).get("cuda_graphs", {}).get("records", [])
        rows.append(("torch CUDA graph, 5 replays: cuda_graphs table", "ok" if s.returncode == 0 else "FAILED",
                     json.dumps(recs)[:300] if recs else "no graph found"))
        ok &= s.returncode == 0 and sum(r.get("replays", 0) for r in recs) == 5
    else:
        ok = False
        rows.append(("torch CUDA graphs", "FAILED", "see stderr"))

    import torch

    text = "\n".join([f"device: {torch.cuda.get_device_name(0)}", "", "| check | result | note |", "|---|---|---|",
                      *("| " + " | ".join(r) + " |" for r in rows)])
    print(text)
    (out / "frameworks.md").write_text(text + "\n")
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
