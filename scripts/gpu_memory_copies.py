"""Copies, memory and graph capture on a real NVIDIA GPU, with the program's own counts
as the truth: one command.

    python scripts/gpu_memory_copies.py OUTDIR      # after gpu_session.sh's set-up

Programs run as their own processes, as users run them:

1. torch under torch.profiler (``profile_memory``, 5 scheduled steps) with the CUDA
   allocator's history recorded: per step pageable and pinned host-to-device copies of
   16 MiB, 64 small (4 KiB) pageable copies, a device-to-host copy, a matrix product;
   then a fragmenting pattern that leaves the allocator's cache holding much more than
   was ever allocated at once, a CUDA graph captured inside the record and replayed,
   and an allocation the device cannot hold (an out-of-memory error, caught). It writes
   the Kineto trace, ``torch.cuda.memory._dump_snapshot``'s pickle and the truth
   (copies by kind with bytes, torch's own peaks, launches captured) as JSON;
2. the same program without torch.profiler under ``polyprof run`` (the cupti plugin);
3. JAX: ``device_put`` and ``device_get`` of known sizes under ``jax.profiler.trace``
   (the XSpace's copies and their ``memcpy_details``).

Then polyprof reads each file (``summary --json``) and this prints its copies table,
findings and memory peaks beside the truth. OUTDIR keeps the files (small: the tests
take them as fixtures, tests/data/h200/). Exit status 1 when a reading disagrees.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
MIB = 1 << 20

TORCH_PROGRAM = textwrap.dedent('''
    import json, sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    out, mode = sys.argv[1], sys.argv[2]
    MIB = 1 << 20
    truth = {"HtoD": [0, 0], "DtoH": [0, 0], "pageable": 0, "small": 0}
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats()
    if mode == "profile":
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    def count(kind, nbytes, pageable=False):
        truth[kind][0] += 1; truth[kind][1] += nbytes
        truth["pageable"] += pageable; truth["small"] += kind == "HtoD" and nbytes < MIB

    w = torch.randn(1024, 1024, device="cuda")
    big = torch.randn(4 * MIB)                        # 16 MiB, pageable
    pinned = torch.randn(4 * MIB).pin_memory()        # 16 MiB, pinned
    small = [torch.randn(1024) for _ in range(64)]    # 4 KiB each, pageable
    m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()).cuda()
    gx = torch.randn(64, 512, device="cuda")
    if mode == "plain":   # the module's weight and bias, copied before torch.profiler starts
        count("HtoD", 512 * 512 * 4, True); count("HtoD", 512 * 4, True)

    def step():
        a = big.to("cuda"); count("HtoD", 16 * MIB, True)
        b = pinned.to("cuda", non_blocking=True); count("HtoD", 16 * MIB)
        parts = [s.to("cuda") for s in small]
        for _ in parts:
            count("HtoD", 4096, True)
        c = (w @ w).sum() + a.sum() + b.sum() + sum(p.sum() for p in parts)
        host = a.cpu(); count("DtoH", 16 * MIB, True)
        value = float(c); count("DtoH", 4)               # .item(): a 4-byte copy
        return value + float(host[0])

    def fragment():   # freed blocks the next, larger, allocations cannot reuse: cached
        xs = [torch.empty(25 * MIB, dtype=torch.uint8, device="cuda") for _ in range(40)]
        del xs
        ys = [torch.empty(30 * MIB, dtype=torch.uint8, device="cuda") for _ in range(40)]
        del ys

    def capture():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            m(gx)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m(gx)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()

    def oom():
        try:
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            truth["oom"] = True

    def work(prof):
        for _ in range(5):
            step()
            if prof is not None:
                prof.step()
        fragment()
        capture()
        oom()
        torch.cuda.synchronize()

    if mode == "profile":
        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=acts, profile_memory=True, record_shapes=True,
                     schedule=schedule(wait=0, warmup=0, active=6)) as prof:
            work(prof)
        prof.export_chrome_trace(out + "/torch_copies_h200.json")
        torch.cuda.memory._dump_snapshot(out + "/torch_memory_h200.pickle")
        torch.cuda.memory._record_memory_history(enabled=None)
    else:
        work(None)
    truth["max_allocated"] = torch.cuda.max_memory_allocated()
    truth["max_reserved"] = torch.cuda.max_memory_reserved()
    truth["end_allocated"] = torch.cuda.memory_allocated()
    truth["end_reserved"] = torch.cuda.memory_reserved()
    truth["torch"] = torch.__version__
    with open(out + f"/torch_truth_{mode}.json", "w") as f:
        json.dump(truth, f, indent=1)
''')

JAX_PROGRAM = textwrap.dedent('''
    import json, sys
    import numpy as np, jax, jax.numpy as jnp
    out = sys.argv[1]
    MIB = 1 << 20
    host = np.ones(4 * MIB, np.float32)                # 16 MiB
    small = np.ones(1024, np.float32)                  # 4 KiB
    f = jax.jit(lambda x: x * 2.0)
    s0 = jax.device_put(small)                         # compile and warm up outside the record
    jax.block_until_ready(f(jax.device_put(host)) + s0.sum())
    truth = {"HtoD": [0, 0], "DtoH": [0, 0]}
    jax.profiler.start_trace(out + "/jaxtrace")
    for i in range(4):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            x = jax.device_put(host); truth["HtoD"][0] += 1; truth["HtoD"][1] += host.nbytes
            s = jax.device_put(small); truth["HtoD"][0] += 1; truth["HtoD"][1] += small.nbytes
            y = f(x) + s.sum()
            back = np.asarray(jax.device_get(y)); truth["DtoH"][0] += 1; truth["DtoH"][1] += back.nbytes
    jax.profiler.stop_trace()
    truth["jax"] = jax.__version__
    with open(out + "/jax_truth.json", "w") as f_:
        json.dump(truth, f_, indent=1)
''')


def run(args: list[str], cwd: Path | None = None) -> bool:
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=240, cwd=cwd)
    if r.returncode != 0:
        print(f"failed ({r.returncode}): {' '.join(args)}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}", file=sys.stderr)
    return r.returncode == 0


def summary(path: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", "--all-steps", str(path)],
                       capture_output=True, text=True, env=ENV, timeout=240)
    if r.returncode != 0:
        print(f"summary of {path.name} failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
        return {}
    return json.loads(r.stdout)


def table(doc: dict, name: str) -> list[dict]:
    return doc.get("tables", {}).get(name, {}).get("records", [])


def copies_by_kind(doc: dict) -> dict[str, tuple[int, int, int, int]]:
    """kind -> (count, bytes, small, pageable), summed over devices."""
    out: dict[str, tuple[int, int, int, int]] = {}
    for r in table(doc, "copies"):
        c, b, s, p = out.get(r["kind"], (0, 0, 0, 0))
        out[r["kind"]] = (c + int(r["count"]), b + int(r["total_bytes"] or 0), s + int(r["small"] or 0),
                          p + int(r["pageable"] or 0))
    return out


def check(label: str, got: object, want: object, lines: list[str], ok: list[bool]) -> None:
    good = got == want
    ok.append(good)
    lines.append(f"| {label} | {got} | {want} | {'ok' if good else 'DIFFERS'} |")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_copies").resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_copies.py").write_text(TORCH_PROGRAM)
    (out / "jax_copies.py").write_text(JAX_PROGRAM)
    lines = ["| check | polyprof | the program's own count | |", "|---|---|---|---|"]
    ok: list[bool] = []
    if run([sys.executable, str(out / "torch_copies.py"), str(out), "profile"]):
        subprocess.run(["gzip", "-f", str(out / "torch_copies_h200.json")], check=False)
        truth = json.loads((out / "torch_truth_profile.json").read_text())
        print("torch truth:", json.dumps(truth))
        doc = summary(out / "torch_copies_h200.json.gz")
        got = copies_by_kind(doc)
        print("kineto copies:", got, "\nfindings:", [f["id"] for f in doc.get("findings", [])])
        for kind in ("HtoD", "DtoH"):
            check(f"Kineto {kind} count, bytes", got.get(kind, (0, 0))[:2], tuple(truth[kind]), lines, ok)
        check("Kineto small copies", got.get("HtoD", (0, 0, 0, 0))[2], truth["small"], lines, ok)
        check("Kineto pageable copies", sum(v[3] for v in got.values()), truth["pageable"], lines, ok)
        snap = summary(out / "torch_memory_h200.pickle")
        peaks = table(snap, "memory_peak")
        print("snapshot memory_peak:", peaks[:3], "\nfindings:", [f["id"] for f in snap.get("findings", [])])
        dev = [p for p in peaks if str(p.get("device", "")).startswith("/device:GPU")]
        check("snapshot peak bytes", dev[0]["peak_bytes"] if dev else None, truth["max_allocated"], lines, ok)
        (out / "torch_copies_summary.json").write_text(json.dumps(doc)[:2_000_000])
        (out / "torch_memory_summary.json").write_text(json.dumps(snap)[:2_000_000])
    if run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out / "torch_copies_cupti.polyprof"),
            str(out / "torch_copies.py"), str(out), "plain"]):
        truth = json.loads((out / "torch_truth_plain.json").read_text())
        doc = summary(out / "torch_copies_cupti.polyprof")
        got = copies_by_kind(doc)
        print("cupti copies:", got, "\nfindings:", [f["id"] for f in doc.get("findings", [])])
        for kind in ("HtoD", "DtoH"):
            check(f"cupti {kind} count, bytes", got.get(kind, (0, 0))[:2], tuple(truth[kind]), lines, ok)
        check("cupti pageable copies", sum(v[3] for v in got.values()), truth["pageable"], lines, ok)
        (out / "torch_cupti_summary.json").write_text(json.dumps(doc)[:2_000_000])
    if run([sys.executable, str(out / "jax_copies.py"), str(out)]):
        truth = json.loads((out / "jax_truth.json").read_text())
        found = sorted((out / "jaxtrace").rglob("*.xplane.pb"))
        if found:
            shutil.copy(found[0], out / "jax_copies_h200.xplane.pb")
            doc = summary(out / "jax_copies_h200.xplane.pb")
            got = copies_by_kind(doc)
            print("xspace copies:", got)
            for kind in ("HtoD", "DtoH"):
                check(f"XSpace {kind} count, bytes", got.get(kind, (0, 0))[:2], tuple(truth[kind]), lines, ok)
            (out / "jax_copies_summary.json").write_text(json.dumps(doc)[:2_000_000])
        shutil.rmtree(out / "jaxtrace", ignore_errors=True)
    (out / "copies.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok and all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
