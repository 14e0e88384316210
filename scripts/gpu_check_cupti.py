"""The cupti plugin on a real NVIDIA GPU, against torch.profiler: one command.

    pip install -e '.[cuda,torch]' nvtx && python setup.py build_ext --inplace
    python scripts/gpu_check_cupti.py            # prints a table for docs/benchmarks.md

Runs, each as its own process, as users run them:

1. a PyTorch workload without any profiler in the script (matmuls, elementwise ops,
   copies), under ``polyprof run --plugins host,cupti`` and under torch.profiler
   (CUDA activity): kernel count (must be equal) and total kernel time (within 1%);
2. a program with NVTX ranges (``nvtx.annotate``, the nvtx package's domain API with
   registered strings, and ``torch.cuda.nvtx.range_push``, NVTX's core API) and marks under
   ``polyprof run``: each range's count (5 of each) and projected device time (polyprof's
   section statistics) against the kernels launched inside it, recorded by polyprof's
   NVTX injection library (plugins/nvtx);
3. the clock bound of the cupti plugin's CUPTI -> session clock fit; the same workload
   through the Python buffer sink (``implementation: python``, cupti-python's callbacks):
   kernel count equal, no problem line;
4. collection cost per kernel: a launch-bound loop of tiny kernels, plain / under
   polyprof (cupti) / under torch.profiler, alternated, ``--repeats`` times each; cost
   per kernel = (time profiled - time plain) / kernels; min and median;
5. the default session (``polyprof run`` with no ``--plugins``) on the workload, plain
   and with torch.profiler started by the script itself: the cupti plugin is chosen
   (or defers to Kineto) and every kernel appears once (count equal to torch.profiler's).

Exit status 1 when a check fails; ``--out FILE`` also writes the table there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = "host,polyprof.plugins.cupti:CuptiPlugin"

WORKLOAD = textwrap.dedent('''
    import sys
    import torch
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "torch":  # the whole script recorded, as polyprof run records it
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.start()
    dev = torch.device("cuda")
    x = torch.randn(1024, 1024, device=dev)
    w = torch.randn(1024, 1024, device=dev)
    host = torch.randn(1 << 20)
    for _ in range(50):
        x = torch.relu(x @ w) / 1024.0
        y = x.sum()
    z = host.to(dev) + torch.zeros(1 << 20, device=dev)
    torch.cuda.synchronize()
    if mode == "torch":
        prof.stop()
        prof.export_chrome_trace(out)
''')

NVTX_PROGRAM = textwrap.dedent('''
    import sys
    import nvtx, torch
    dev = torch.device("cuda")
    x = torch.randn(2048, 2048, device=dev)
    for step in range(5):
        with nvtx.annotate("forward"):  # the nvtx package: domain API, registered strings
            for _ in range(4):
                x = torch.tanh(x @ x) * 0.5
        torch.cuda.nvtx.range_push("reduce")  # torch's NVTX: nvtxRangePushA
        s = x.sum()
        torch.cuda.nvtx.range_pop()
        nvtx.mark("step end")
    torch.cuda.synchronize()
''')

TINY = textwrap.dedent('''
    import sys, time
    import torch
    mode, n = sys.argv[1], int(sys.argv[2])
    t = torch.zeros(1, device="cuda")
    for _ in range(200):
        t.add_(1)
    torch.cuda.synchronize()
    def loop():
        a = time.perf_counter()
        for _ in range(n):
            t.add_(1)
        torch.cuda.synchronize()
        return time.perf_counter() - a
    if mode == "torch":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            s = loop()
    else:
        s = loop()
    print("LOOP_S", s)
''')


def run(args: list[str], env: dict[str, str] | None = None) -> str:
    merged = {**os.environ, **(env or {})}
    if env and "PYTHONPATH" in env and os.environ.get("PYTHONPATH"):  # keep the caller's path after ours
        merged["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    r = subprocess.run(args, capture_output=True, text=True, env=merged, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r.stdout


def polyprof_run(script: Path, out: Path, *args: str, options: str | None = None) -> None:
    extra = ["--plugin-options", options] if options else []
    run([sys.executable, "-m", "polyprof", "run", "--plugins", PLUGINS, "--no-summary", *extra, "-o", str(out),
         str(script), *args], env={"PYTHONPATH": str(ROOT / "src")})


def kernel_rows(trace):
    """Rows of the kernels on device planes (derive/correlate's device activity)."""
    import numpy as np

    from polyprof.derive.correlate import device_activity_rows
    from polyprof.trace.categories import Kind

    return np.intersect1d(device_activity_rows(trace), trace.rows_of_kind(Kind.KERNEL))


def kernels(trace) -> tuple[int, int]:
    """(count, total ns) of kernels on device planes."""
    rows = kernel_rows(trace)
    return len(rows), int(trace.events["dur_ns"][rows].sum())


def preflight() -> list[str]:
    """What this machine lacks for the check, one line each."""
    import importlib.util

    out = []
    for mod, why in (("torch", "PyTorch with CUDA"), ("nvtx", "the nvtx package (pip install nvtx)"),
                     ("cupti", "cupti-python (pip install 'polyprof[cuda]')")):
        if importlib.util.find_spec(mod) is None:
            out.append(f"{mod} is not installed: {why}")
    if not out:
        import torch

        if not torch.cuda.is_available():
            out.append("torch sees no CUDA device")
        from polyprof.plugins.cupti import CuptiPlugin

        avail = CuptiPlugin.availability()
        if not avail:
            out.append(f"the cupti plugin cannot run: {avail.reason}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", type=int, default=20000, help="kernels in the launch-bound loop")
    ap.add_argument("--out", type=Path, help="also write the table (markdown) to this file")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    problems = preflight()
    if problems:
        print("cannot run the GPU check here:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    import polyprof
    from polyprof.analyze.frames import column
    from polyprof.analyze.sections import section_stats
    from polyprof.trace.metadata_keys import clock_fits

    rows: list[tuple[str, str, str, str]] = []
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        wl, nv, tiny = tmp / "workload.py", tmp / "nvtx_program.py", tmp / "tiny.py"
        wl.write_text(WORKLOAD)
        nv.write_text(NVTX_PROGRAM)
        tiny.write_text(TINY)

        # 1. kernels: polyprof (cupti) vs torch.profiler, alternated
        counts: dict[str, list[int]] = {"cupti": [], "torch": []}
        total: dict[str, list[int]] = {"cupti": [], "torch": []}
        for i in range(a.repeats):
            polyprof_run(wl, tmp / f"wl{i}.polyprof", "plain", "-")
            run([sys.executable, str(wl), "torch", str(tmp / f"wl{i}.json")])
            t_pp = polyprof.load(tmp / f"wl{i}.polyprof")
            for who, t in (("cupti", t_pp), ("torch", polyprof.load(tmp / f"wl{i}.json"))):
                n, ns = kernels(t)
                counts[who].append(n)
                total[who].append(ns)
        ns_pp, ns_tp = statistics.median(total["cupti"]), statistics.median(total["torch"])
        dt = abs(ns_pp - ns_tp) / max(ns_tp, 1) * 100
        same = len(set(counts["cupti"] + counts["torch"])) == 1
        ok &= same and dt <= 1.0
        rows.append(("kernels (count)", ",".join(map(str, counts["cupti"])), ",".join(map(str, counts["torch"])),
                     "equal" if same else "DIFFERENT"))
        rows.append(("kernel time (ms, median)", f"{ns_pp / 1e6:.3f}", f"{ns_tp / 1e6:.3f}",
                     f"{dt:.2f}% apart ({'ok' if dt <= 1.0 else 'over 1%'})"))
        cs = next((f for _plane, plugin, f in clock_fits(t_pp.metadata) if plugin == "cupti"), {})
        rows.append(("clock bound (ns)", f"{cs.get('bound_ns', float('nan')):.0f}", "-",
                     f"{cs.get('samples', 0)} paired samples, drift {cs.get('drift_ppm', 0):.2f} ppm"))
        # 1b. the Python buffer sink (cupti-python's callbacks): every kernel too, nothing unread
        polyprof_run(wl, tmp / "wl_py.polyprof", "plain", "-", options=json.dumps({PLUGINS.split(",")[1]: {"implementation": "python"}}))
        t_py = polyprof.load(tmp / "wl_py.polyprof")
        n_py, _ = kernels(t_py)
        md_py = t_py.metadata.get("cupti", {})
        good = n_py == counts["torch"][0] and md_py.get("implementation") == "python" and not md_py.get("problems")
        ok &= good
        rows.append(("kernels, Python buffer sink", str(n_py), str(counts["torch"][0]),
                     f"{md_py.get('records', 0)} records, dropped {md_py.get('buffers', {}).get('dropped', 0)}"
                     + ("" if good else f" FAIL {md_py.get('problems')}")))
        md = t_pp.metadata.get("cupti", {})
        rows.append(("buffer sink", str(md.get("implementation")), "-",
                     f"{md.get('records', 0)} records, dropped {md.get('buffers', {}).get('dropped', 0)}"))
        left = sorted(md.get("calls_not_kept", {}).items(), key=lambda kv: -kv[1]["calls"])
        rows.append(("query calls counted, not kept", str(sum(v["calls"] for _, v in left)), "-",
                     ", ".join(f"{k} {v['calls']}" for k, v in left[:4]) or "none"))

        # 2. NVTX ranges as sections, projected
        polyprof_run(nv, tmp / "nv.polyprof")
        t_nv = polyprof.load(tmp / "nv.polyprof")
        st = section_stats(t_nv)
        names = list(column(st, "name"))
        for name, api in (("forward", "nvtx.annotate"), ("reduce", "torch.cuda.nvtx")):
            if name not in names:
                ok = False
                rows.append((f"NVTX '{name}' ({api})", "missing", "-", "FAIL"))
                continue
            i = names.index(name)
            count, ops = int(column(st, "count")[i]), int(column(st, "device_ops")[i])
            good = count == 5 and ops > 0
            ok &= good
            rows.append((f"NVTX '{name}' ({api}) projected (ms)", f"{column(st, 'projected_ns')[i] / 1e6:.3f}",
                         f"{column(st, 'device_ns')[i] / 1e6:.3f} kernel ms",
                         f"{count} ranges (5 expected), {ops} kernels" + ("" if good else " FAIL")))
        nv_meta = t_nv.metadata.get("nvtx", {})
        marks = int(nv_meta.get("marks", 0))
        ok &= marks == 5
        rows.append(("NVTX marks (nvtx.mark)", str(marks), "5", "polyprof's NVTX library: "
                     f"{nv_meta.get('attached', 0)} NVTX instances attached, {nv_meta.get('dropped', 0)} dropped"
                     + ("" if marks == 5 else f" FAIL {nv_meta.get('why', '')}")))

        # 4. collection cost per kernel: the launch-bound loop plain, under polyprof, under torch.profiler
        times: dict[str, list[float]] = {"plain": [], "cupti": [], "torch": []}
        for _ in range(a.repeats):
            for mode in ("plain", "cupti", "torch"):
                if mode == "cupti":
                    text = run([sys.executable, "-m", "polyprof", "run", "--plugins", PLUGINS, "--no-summary",
                                "-o", str(tmp / "tiny.polyprof"), str(tiny), "plain", str(a.tiny)],
                               env={"PYTHONPATH": str(ROOT / "src")})
                else:
                    text = run([sys.executable, str(tiny), mode, str(a.tiny)])
                times[mode].append(float(text.split("LOOP_S")[-1].split()[0]))
        base = statistics.median(times["plain"])
        per = {m: [(t - base) / a.tiny * 1e9 for t in times[m]] for m in ("cupti", "torch")}
        rows.append(("collection cost per kernel (ns, min / median)",
                     f"{min(per['cupti']):.0f} / {statistics.median(per['cupti']):.0f}",
                     f"{min(per['torch']):.0f} / {statistics.median(per['torch']):.0f}",
                     f"{a.tiny} tiny kernels, {a.repeats} runs alternated, plain loop {base * 1e3:.1f} ms median"))

        # 5. the default session: cupti chosen by itself, every kernel once (also with the
        #    script's own torch.profiler, which holds CUPTI first)
        n_torch = counts["torch"][0]
        for mode in ("plain", "torch"):
            out = tmp / f"default_{mode}.polyprof"
            run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(wl), mode,
                 str(tmp / "own.json")], env={"PYTHONPATH": str(ROOT / "src")})
            t = polyprof.load(out)
            n, _ = kernels(t)
            md = t.metadata.get("cupti", {})
            plugins = f"cupti ({md.get('records', 0)} records)" if md.get("records") else "torch.profiler"
            same = n == n_torch
            ok &= same
            rows.append((f"default session, script {mode}: kernels", str(n), str(n_torch),
                         f"recorded by {plugins}; {'once each' if same else 'COUNT DIFFERS'}"))

    import torch

    from polyprof.plugins.cupti import buffers

    head = (f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; buffer sink "
            f"{buffers.IMPLEMENTATION}; load average {os.getloadavg()[0]:.1f}")
    lines = [head, "", "| check | polyprof (cupti) | torch.profiler | note |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
