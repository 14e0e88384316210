"""One rank of any size (issue 34, item 1): a Kineto rank of ``--gb`` GB made by
replicating the V100 trace, then ``polyprof convert`` and ``polyprof summary STORE``
as whole processes, each with the peak RSS of its process tree, and each again inside
a memory cgroup of ``--cgroup-mib`` MiB.

    python bench/big_rank.py --gb 2 --workdir /tmp/bigrank
    python bench/big_rank.py --gb 0.2 --compare      # also: tables equal the in-memory path's

The rank: the V100 trace's events, copy after copy, each copy shifted in time by the
trace's span, its ids (``correlation``, ``External id``, flow ids) and step numbers made
distinct, the metadata events once at the end (where Kineto writes them), written as
plain JSON one copy at a time. Peak RSS of the tree: ``/proc`` sampled every 20 ms
(the sum of RSS over the process and its descendants), and ``ru_maxrss`` of the
children (the largest single process). The cgroup: a new cgroup v2 under
``/sys/fs/cgroup`` with ``memory.max`` (and no swap) where that is writable, else
``systemd-run --scope -p MemoryMax=``, else said to be impossible here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
V100 = ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_env import child_env  # noqa: E402

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def make_rank(out: Path, gb: float, src: Path = V100) -> int:
    """Write a Kineto rank of about ``gb`` GB of JSON to ``out``; returns the copies."""
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    t = [e["ts"] for e in timed if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed if isinstance(e.get("ts"), (int, float))) - min(t) + 1000.0
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    one = len(orjson.dumps(timed))
    copies = max(1, round(gb * 1e9 / one))
    head = orjson.dumps(doc)[:-1] + b', "traceEvents": [\n'
    with open(out, "wb") as f:
        f.write(head)
        for k in range(copies):
            f.write(b",\n".join(orjson.dumps(_shifted(e, k, span, step_stride)) for e in timed))
            f.write(b",\n")
        f.write(b",\n".join(orjson.dumps(e) for e in meta))
        f.write(b"]}\n")
    return copies


def _shifted(e: dict, k: int, span: float, step_stride: int) -> dict:
    if not k:
        return e
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = round(e["ts"] + k * span, 3)
    if isinstance(e.get("id"), int):
        e["id"] += k << 40
    m = _STEP.match(str(e.get("name", "")))
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_stride}"
    args = e.get("args")
    if isinstance(args, dict):
        args = e["args"] = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] += k << 40
    return e


# ----------------------------------------------------------------------------- measuring
def _tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and its descendants (KiB), from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, pages = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
        rss[int(d)] = pages * (os.sysconf("SC_PAGE_SIZE") // 1024)
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def measure(argv: list[str], timeout: float, env: dict) -> dict:
    """Run ``argv``; wall seconds, peak RSS of its tree (sampled), exit status, stderr tail."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        peak = 0
        while p.poll() is None:
            peak = max(peak, _tree_rss_kib(p.pid))
            if time.perf_counter() - t0 > timeout:
                p.kill()
            time.sleep(0.02)
        err.seek(0)
        tail = err.read()[-600:].decode("utf-8", "replace")
    return {"s": time.perf_counter() - t0, "tree_peak_mib": peak / 1024, "rc": p.returncode, "err": tail}


def _v1_memory_dir() -> Path | None:
    """This process's cgroup v1 memory folder, where it is writable."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if "memory" in controllers.split(","):
                d = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
                return d if os.access(d, os.W_OK) else None
    except OSError:
        return None
    return None


def cgroup_runner(mib: int) -> tuple[str, list[str] | None]:
    """How to run a command under a memory limit of ``mib`` MiB here: (what, argv prefix)."""
    base = Path("/sys/fs/cgroup")
    me = [sys.executable, __file__, "--in-cgroup", str(mib), "--"]
    if (base / "cgroup.controllers").exists() and os.access(base, os.W_OK):
        return "cgroup v2 (memory.max, memory.swap.max 0)", me
    if _v1_memory_dir() is not None:
        return "cgroup v1 (memory.limit_in_bytes and memory.memsw.limit_in_bytes)", me
    if subprocess.run(["sh", "-c", "command -v systemd-run"], capture_output=True).returncode == 0:
        probe = subprocess.run(["systemd-run", "--scope", "-q", "-p", f"MemoryMax={mib}M", "true"],
                               capture_output=True)
        if probe.returncode == 0:
            return "systemd-run --scope", ["systemd-run", "--scope", "-q", "-p", f"MemoryMax={mib}M",
                                           "-p", "MemorySwapMax=0"]
    return "none: no writable cgroup (v2 or v1 memory) and no working systemd-run", None


def in_cgroup(mib: int, argv: list[str]) -> int:
    """Run ``argv`` in a new memory cgroup limited to ``mib`` MiB (no swap); its exit
    status, and the cgroup's peak and OOM counts on stderr."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    parent = Path("/sys/fs/cgroup") if v2 else _v1_memory_dir()
    assert parent is not None
    cg = parent / f"polyprof-bench-{os.getpid()}"
    cg.mkdir()
    limit = str(mib << 20)
    try:
        if v2:
            (cg / "memory.max").write_text(limit)
            if (cg / "memory.swap.max").exists():
                (cg / "memory.swap.max").write_text("0")
        else:
            (cg / "memory.limit_in_bytes").write_text(limit)
            if (cg / "memory.memsw.limit_in_bytes").exists():
                (cg / "memory.memsw.limit_in_bytes").write_text(limit)
        p = subprocess.Popen(argv, preexec_fn=lambda: (cg / "cgroup.procs").write_text(str(os.getpid())))
        rc = p.wait()
        if v2:
            peak = (cg / "memory.peak").read_text().strip() if (cg / "memory.peak").exists() else "0"
            events = " ".join((cg / "memory.events").read_text().split())
        else:
            peak = (cg / "memory.max_usage_in_bytes").read_text().strip()
            events = f"failcnt {(cg / 'memory.failcnt').read_text().strip()}; " + \
                " ".join((cg / "memory.oom_control").read_text().split())
        print(f"cgroup memory peak {int(peak) / 2**20:.0f} MiB; {events}", file=sys.stderr)
        return rc
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=2.0, help="size of the rank's JSON (default 2)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--reuse", action="store_true", help="keep a rank file already in --workdir")
    ap.add_argument("--cgroup-mib", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--compare", action="store_true",
                    help="also the in-memory summary of the file, and compare its tables with the store's")
    ap.add_argument("--src", default=str(ROOT / "src"), help="PYTHONPATH of polyprof for the children")
    ap.add_argument("--bound-mib", type=float, default=None,
                    help="POLYPROF_MEMORY_BOUND for the summaries (default: polyprof's, 512 MiB); a small one "
                         "sends a small rank window by window")
    ap.add_argument("--summary-only", action="store_true",
                    help="reuse the rank and the store already in --workdir: measure the summary only")
    ap.add_argument("--in-cgroup", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("cmd", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_cgroup is not None:
        sys.exit(in_cgroup(args.in_cgroup, args.cmd))
    tmp = Path(args.workdir or tempfile.mkdtemp(prefix="polyprof-bigrank-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rank = tmp / "rank0.json"
    t0 = time.perf_counter()
    if not ((args.reuse or args.summary_only) and rank.exists()):
        copies = make_rank(rank, args.gb)
        print(f"# made {rank}: {copies} copies of {V100.name}, {rank.stat().st_size / 1e9:.2f} GB, "
              f"{time.perf_counter() - t0:.0f} s")
    else:
        print(f"# reusing {rank}: {rank.stat().st_size / 1e9:.2f} GB")
    env = child_env(args.src)
    if args.bound_mib is not None:
        env["POLYPROF_MEMORY_BOUND"] = str(args.bound_mib)
    py = [sys.executable, "-m", "polyprof"]
    store = tmp / "rank0.store"
    steps = [("convert", [*py, "convert", str(rank), "-o", str(store), "--overwrite"]),
             ("summary STORE --json", [*py, "summary", str(store), "--json"])]
    if args.summary_only:
        steps = steps[1:]
    print(f"# uptime: {os.popen('uptime').read().strip()}")
    for name, argv in steps:
        res = measure(argv, args.timeout, env)
        _show(name, res)
    what, prefix = cgroup_runner(args.cgroup_mib)
    print(f"# memory cgroup of {args.cgroup_mib} MiB: {what}")
    if prefix is not None:
        for name, argv in steps:
            res = measure([*prefix, *argv], args.timeout, env)
            _show(f"{name} in the cgroup", res)
    if args.compare:
        _compare(rank, store, env, args.timeout)
    print(f"# uptime: {os.popen('uptime').read().strip()}")


def _compare(rank: Path, store: Path, env: dict, timeout: float) -> None:
    """The in-memory summary of the file against the store's, table by table (a store is
    a job: its tables carry a rank column; per-event tables stay with the rank)."""
    py = [sys.executable, "-m", "polyprof"]
    out = {}
    for name, target in (("file", rank), ("store", store)):
        r = subprocess.run([*py, "summary", str(target), "--json"], capture_output=True, env=env, timeout=timeout)
        out[name] = json.loads(r.stdout)
    single, job = out["file"]["tables"], out["store"]["tables"]
    same, differ, left = [], [], []
    for name, table in single.items():
        if name not in job:
            left.append(name)
            continue
        mine = [{k: v for k, v in r.items() if k != "rank"} for r in job[name]["records"]]
        (same if mine == table["records"] else differ).append(name)
    print(f"tables equal to the in-memory path's: {len(same)} of {len(single)}; differing: {differ}; "
          f"per-event (kept with the rank): {left}")
    whole = subprocess.run([*py, "summary", str(store), "--json"], capture_output=True, timeout=timeout,
                           env={**env, "POLYPROF_MEMORY_BOUND": str(1 << 20)})  # read whole, however big
    r = subprocess.run([*py, "-v", "summary", str(store), "--json"], capture_output=True, env=env, timeout=timeout)
    how = "window by window" if b"windows of whole steps" in r.stderr else "read whole"
    print(f"summary STORE --json ({how}) is byte for byte that of the store read whole: {r.stdout == whole.stdout}")


def _show(name: str, res: dict) -> None:
    rc = res["rc"]
    status = "ok" if rc == 0 else f"FAILED rc={rc}: {res['err'].strip()[-300:]}"
    extra = "".join(line for line in res["err"].splitlines() if line.startswith("cgroup memory peak"))
    print(f"{name:40s} {res['s']:8.1f} s  tree peak RSS {res['tree_peak_mib']:7.0f} MiB  {status} {extra}")


if __name__ == "__main__":
    main()
