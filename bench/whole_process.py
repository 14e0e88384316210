"""Issue 35's targets, whole processes as users run them, paired with the peer.

For every Kineto trace HTA reads (tests/data/traces/kineto, tb_plugin's 2021 samples in
tests/data/peers/tb_plugin, the H200 torch traces in tests/data/h200), and for a job of
two of them in one directory (HTA's two sampled ranks, :data:`JOBS`), one ``polyprof
summary FILE`` (or ``DIR``) process and one HTA 0.5 process (load +
``get_temporal_breakdown`` + ``get_gpu_kernel_breakdown``) per round; for every XSpace
(the TPU sample, TraceLens's MI300 GPU files, JAX's H200 XSpaces in tests/data/h200) one
``polyprof summary`` and one XProf process running ``overview_page`` and
``framework_op_stats`` on the file.
Rounds alternate which tool goes first; each child's wall time, CPU time (user + sys)
and peak RSS are read by GNU ``time`` (the CPU from ``wait4`` on it: microseconds). Printed per file: min and median
of each and of the per-round ratios (peer / polyprof: above 1 means polyprof is faster
or smaller), and the load average before and after, with which targets hold.

    python bench/whole_process.py --rounds 3
    python bench/whole_process.py --rounds 5 --only v100,tpu
    python bench/whole_process.py --rounds 5 --against /tmp/before/src   # a before tree in the same rounds
    python bench/whole_process.py --rounds 3 --only jax_cpu --jax-steps 3000   # a bigger XSpace, made here
    python bench/whole_process.py --rounds 3 --inputs my_rank0.json.gz my_job_dir/ my.xplane.pb

``--inputs`` times your own traces instead of the shared ones: a Kineto/Chrome JSON file
(``.json`` or ``.json.gz``) or a directory of such rank files against HTA, an
``.xplane.pb`` file against XProf. Each is copied into a directory of its own first,
as the shared ones are.

``--against SRC`` adds a third process per round, ``polyprof summary`` run from another
tree's ``src`` (its C extensions built in place), in the same rotation; each input then
prints that tree's CPU and peak RSS beside this one's and the change.

One untimed warm-up process per tool runs first (bytecode caches, child_env.py).

Where xprof-rs (PyPI, a Rust XProf backend) is installed, each XSpace round also times
it: one ``xprof-rs`` server process started on a copy of the file laid out as a run,
asked for ``overview_page`` and ``framework_op_stats`` over HTTP, then stopped; its CPU
time and peak RSS by ``wait4``, its wall time from its start to the second answer. A
file it answers with an error (the TPU sample: "An event metadata ID is out of range")
is reported as not read.
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto"
TB_PLUGIN = ROOT / "tests" / "data" / "peers" / "tb_plugin"
#: jobs of several ranks (label, rank files): HTA's two sampled ranks of one job
JOBS = [("job_sampled_rank0_1", [KINETO / "sampled_rank0.json.gz", KINETO / "sampled_rank1.json.gz"])]
#: traces recorded on an H200 by this project (tests/data/h200): JAX's own GPU XSpaces, and
#: Kineto traces of CUDA graph replays and of a transformer's training
H200 = ROOT / "tests" / "data" / "h200"
XSPACES = [ROOT / "tests" / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb",
           *sorted((ROOT / "tests" / "data" / "peers" / "tracelens").glob("*.xplane.pb")),
           H200 / "jax_train_step_h200.xplane.pb", H200 / "jax_transformer_h200.xplane.pb.gz"]

HTA = r"""
import io, sys, logging, warnings, contextlib
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
with contextlib.redirect_stdout(io.StringIO()):
    a = TraceAnalysis(trace_dir=sys.argv[1])
    a.get_temporal_breakdown(visualize=False)
    a.get_gpu_kernel_breakdown(visualize=False)
"""

XPROF = r"""
import sys, logging
logging.disable(logging.CRITICAL)
from xprof.convert import raw_to_tool_data as r
for tool in ("overview_page", "framework_op_stats"):
    r.xspace_to_tool_data([sys.argv[1]], tool, {"use_saved_result": False})
"""


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of one child process. The
    child runs under GNU time, whose peak RSS is the child's own (``wait4``'s rusage of a
    child forked from this process would also count the pages of the fork before its
    exec); its CPU is ``wait4``'s rusage of GNU time, which includes the child it reaped,
    to the microsecond (GNU time prints hundredths)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(["/usr/bin/time", "-f", "%U %S %M", "-o", out.name, *cmd], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = p.stderr.read() if p.stderr else b""
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here
        if p.returncode:
            raise RuntimeError(f"{' '.join(cmd[:4])} failed: {err.decode(errors='replace')[-1500:]}")
        rss = out.read().split()[-1]
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": int(rss) / 1024}


def xprof_rs_binary() -> str | None:
    """The ``xprof-rs`` executable beside this interpreter or on PATH, if installed."""
    beside = Path(sys.executable).with_name("xprof-rs")
    return str(beside) if beside.exists() else shutil.which("xprof-rs")


def measure_xprof_rs(binary: str, xplane: Path, tmp: Path) -> dict[str, float]:
    """One xprof-rs process: start, overview_page and framework_op_stats of ``xplane``,
    stop (see the module doc). RuntimeError where it does not answer both."""
    run = tmp / "plugins" / "profile" / "run"
    run.mkdir(parents=True, exist_ok=True)
    shutil.copy(xplane, run / "host.xplane.pb")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/data/plugin/profile"
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "--logdir", str(tmp), "--port", str(port), "--host", "127.0.0.1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/runs", timeout=5).read()
                break
            except OSError:
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError("xprof-rs did not start") from None
                time.sleep(0.002)
        for tool in ("overview_page", "framework_op_stats"):
            try:
                body = urllib.request.urlopen(f"{base}/data?run=run&tag={tool}&host=host", timeout=600).read()
            except urllib.error.HTTPError as e:
                body = e.read() or str(e).encode()
            if not body.startswith((b"[", b"{")):
                raise RuntimeError(f"xprof-rs {tool}: {body[:120].decode(errors='replace')}")
        wall = time.perf_counter() - t0
    finally:
        os.kill(p.pid, signal.SIGTERM)
        _, _, ru = os.wait4(p.pid, 0)
        p.returncode = 0  # reaped here
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss / 1024}


def own_inputs(tmp: Path, paths: list[Path]) -> list[tuple[str, Path, str]]:
    """(label, copied file or directory, peer) for ``--inputs``; SystemExit naming a path
    that is neither an XSpace file, a Kineto JSON file nor a directory holding some."""
    out = []
    for n, src in enumerate(paths):
        label = src.name.split(".")[0] or f"input{n}"
        d = tmp / f"own{n}_{label}"
        if src.is_dir():
            ranks = sorted(f for f in src.iterdir() if f.name.endswith((".json", ".json.gz")))
            if not ranks:
                raise SystemExit(f"{src}: no .json or .json.gz rank files in this directory")
            d.mkdir()
            for f in ranks:
                shutil.copy(f, d / f.name)
            out.append((label, d, "hta"))
        elif src.is_file() and src.name.endswith((".json", ".json.gz", ".xplane.pb")):
            d.mkdir()
            out.append((label, Path(shutil.copy(src, d / src.name)), "xprof" if src.name.endswith(".pb") else "hta"))
        else:
            raise SystemExit(f"{src}: not a .json, .json.gz or .xplane.pb file, nor a directory of rank files")
    return out


def _data_size(path: Path) -> int:
    """Bytes of the trace itself: a gzipped file's uncompressed size (read untimed)."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
    return path.stat().st_size


def inputs(tmp: Path, jax_steps: int = 0) -> list[tuple[str, Path, str]]:
    """(label, file, peer) for every shared input: Kineto files each in a directory of their
    own (HTA reads a directory of ranks), XSpace files as they are; with ``jax_steps``, a JAX
    CPU program's XSpace of that many steps written first (jax_cpu_profile.py)."""
    out = []
    kineto = [*sorted(KINETO.glob("*.json.gz")), H200 / "torch_cuda_graph_h200.json.gz",
              H200 / "torch_transformer_h200.json.gz"]
    for src in kineto:
        d = tmp / src.name.split(".")[0]
        d.mkdir()
        shutil.copy(src, d / src.name)
        out.append((src.name.split(".")[0], d / src.name, "hta"))
    for label, ranks in JOBS:  # a job: a directory of its ranks, as HTA and `polyprof summary DIR` read it
        d = tmp / label
        d.mkdir()
        for src in ranks:
            shutil.copy(src, d / src.name)
        out.append((label, d, "hta"))
    for xz in sorted(TB_PLUGIN.glob("*.pt.trace.json.xz")):
        d = tmp / ("tb_" + xz.name.split(".")[0])
        d.mkdir()
        f = d / xz.name.replace(".json.xz", ".json.gz")
        f.write_bytes(gzip.compress(lzma.decompress(xz.read_bytes()), 6))
        out.append((d.name, f, "hta"))
    for x in XSPACES:  # copied: XProf writes its op_stats cache next to the file it reads
        if x.exists():
            d = tmp / ("xs_" + x.name.split(".")[0])
            d.mkdir()
            if x.suffix == ".gz":  # XProf reads the XSpace as written: decompressed here
                copy = d / x.stem
                copy.write_bytes(gzip.decompress(x.read_bytes()))
            else:
                copy = Path(shutil.copy(x, d / x.name))
            out.append((x.name.split(".")[0], copy, "xprof"))
    if jax_steps:
        made = subprocess.run([sys.executable, str(Path(__file__).with_name("jax_cpu_profile.py")),
                               str(tmp / "jax_run"), str(jax_steps)], capture_output=True, text=True, check=True)
        d = tmp / "xs_jax_cpu"
        d.mkdir()
        out.append((f"jax_cpu_{jax_steps}_steps", Path(shutil.copy(made.stdout.strip(), d / "jax_cpu.xplane.pb")),
                    "xprof"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated substrings of the inputs to run")
    ap.add_argument("--against", help="another tree's src directory: its summary timed in the same rounds")
    ap.add_argument("--jax-steps", type=int, default=0, metavar="N",
                    help="also a JAX CPU program's XSpace of N steps (jax_cpu_profile.py; 3000: ~16 MB)")
    ap.add_argument("--inputs", nargs="+", type=Path, metavar="PATH",
                    help="your own traces instead of the shared ones: Kineto .json/.json.gz files or "
                         "directories of them (against HTA), .xplane.pb files (against XProf)")
    args = ap.parse_args(argv)
    env, peer_env = child_env(str(ROOT / "src")), child_env(None)
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="polyprof-whole-") as tmp:
        todo = own_inputs(Path(tmp), args.inputs) if args.inputs else inputs(Path(tmp), args.jax_steps)
        if args.only:
            keys = args.only.split(",")
            todo = [t for t in todo if any(k in t[0] for k in keys)]
        for label, path, peer in todo:
            poly = [sys.executable, "-m", "polyprof", "summary", str(path)]
            other = [sys.executable, "-c", HTA, str(path if path.is_dir() else path.parent)] if peer == "hta" else \
                [sys.executable, "-c", XPROF, str(path)]
            measure(poly, env)  # warm-up, untimed
            before_env = child_env(args.against) if args.against else None
            if before_env is not None:
                measure(poly, before_env)
            try:
                measure(other, peer_env)
            except RuntimeError as e:
                print(f"{label}: {peer} does not read it ({str(e).strip().splitlines()[-1][:120]}); skipped",
                      flush=True)
                continue
            rs_bin = xprof_rs_binary() if peer == "xprof" else None
            if rs_bin:
                try:
                    measure_xprof_rs(rs_bin, path, Path(tmp) / f"rs-{label}-warm")
                except RuntimeError as e:
                    print(f"{label}: xprof-rs does not read it ({e}); not timed", flush=True)
                    rs_bin = None
            ours, theirs, rs, before = [], [], [], []
            for r in range(args.rounds):
                pair = [(ours, poly, env), (theirs, other, peer_env)]
                if before_env is not None:
                    pair.append((before, poly, before_env))
                    pair = pair[r % 3:] + pair[:r % 3]  # each goes first in turn
                for acc, cmd, e in (pair if r % 2 == 0 or before_env is not None else pair[::-1]):
                    acc.append(measure(cmd, e))
                if rs_bin:
                    rs.append(measure_xprof_rs(rs_bin, path, Path(tmp) / f"rs-{label}-{r}"))
            if before:
                b_cpu, a_cpu = [x["cpu"] for x in before], [x["cpu"] for x in ours]
                print(f"{label}: before ({args.against}) cpu {min(b_cpu):.3f} / {statistics.median(b_cpu):.3f} s, "
                      f"rss {statistics.median(x['rss'] for x in before):.0f} MiB; now cpu {min(a_cpu):.3f} / "
                      f"{statistics.median(a_cpu):.3f} s, rss {statistics.median(x['rss'] for x in ours):.0f} MiB; "
                      f"cpu {100 * (statistics.median(a_cpu) / statistics.median(b_cpu) - 1):+.0f}% at the median",
                      flush=True)
            if rs:
                rr = {k: [t[k] / o[k] for o, t in zip(ours, rs)] for k in ("wall", "cpu", "rss")}
                print(f"{label}: xprof-rs wall {statistics.median(t['wall'] for t in rs):.2f} s, cpu "
                      f"{statistics.median(t['cpu'] for t in rs):.2f} s, rss {statistics.median(t['rss'] for t in rs):.0f}"
                      f" MiB; xprof-rs/polyprof wall {min(rr['wall']):.1f}x / {statistics.median(rr['wall']):.1f}x, cpu "
                      f"{min(rr['cpu']):.1f}x / {statistics.median(rr['cpu']):.1f}x", flush=True)
            ratio = {k: [t[k] / o[k] for o, t in zip(ours, theirs)] for k in ("wall", "cpu", "rss")}
            size = sum(map(_data_size, path.iterdir())) if path.is_dir() else _data_size(path)
            rows.append((label, peer, size, ours, theirs, ratio))
            print(f"{label} ({size / 1e6:.1f} MB uncompressed, vs {peer}): polyprof wall {min(o['wall'] for o in ours):.2f} / "
                  f"{statistics.median(o['wall'] for o in ours):.2f} s, cpu {min(o['cpu'] for o in ours):.3f} / "
                  f"{statistics.median(o['cpu'] for o in ours):.3f} s, rss "
                  f"{statistics.median(o['rss'] for o in ours):.0f} MiB; {peer} wall "
                  f"{statistics.median(t['wall'] for t in theirs):.2f} s, rss "
                  f"{statistics.median(t['rss'] for t in theirs):.0f} MiB, cpu "
                  f"{min(t['cpu'] for t in theirs):.3f} / {statistics.median(t['cpu'] for t in theirs):.3f} s; "
                  f"{peer}/polyprof wall {min(ratio['wall']):.2f}x / {statistics.median(ratio['wall']):.2f}x, cpu "
                  f"{min(ratio['cpu']):.2f}x / {statistics.median(ratio['cpu']):.2f}x, rss "
                  f"{statistics.median(ratio['rss']):.2f}x", flush=True)
    load1 = os.getloadavg()
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}; {args.rounds} rounds, alternating")
    hta_rows = [r for r in rows if r[1] == "hta"]
    xprof_rows = [r for r in rows if r[1] == "xprof"]
    if hta_rows:
        cpu10 = all(min(r[5]["cpu"]) >= 10 for r in hta_rows)
        mem = all(statistics.median(r[5]["rss"]) >= 1 / 0.3 for r in hta_rows)
        print(f"target: summary >= 10x HTA in CPU seconds on every Kineto trace (lowest round): "
              f"{'holds' if cpu10 else 'does not hold'}; peak memory <= 0.3x HTA's: {'holds' if mem else 'does not hold'}")
    if xprof_rows:
        faster = all(min(r[5]["wall"]) > 1 for r in xprof_rows)
        cpu = all(min(r[5]["cpu"]) > 1 for r in xprof_rows)
        median = all(statistics.median(r[5][k]) > 1 for r in xprof_rows for k in ("wall", "cpu"))
        print(f"target: summary faster than XProf overview_page + framework_op_stats on every XSpace: "
              f"wall (lowest round) {'holds' if faster else 'does not hold'}, CPU (lowest round) "
              f"{'holds' if cpu else 'does not hold'}, wall and CPU at the median {'hold' if median else 'do not hold'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
