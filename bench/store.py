"""Beyond one machine's memory: the store on many ranks, and the Perfetto export.

    python bench/store.py ranks --ranks 64 --copies 3     # ~3 GB of Kineto JSON
    python bench/store.py ranks --ranks 8 --copies 1 --hta
    python bench/store.py perfetto --repeat 7             # Perfetto protobuf vs Chrome JSON

``ranks`` makes N rank files from the V100 trace (each rank: ``--copies`` copies of its
events one after another in time, ids made distinct per copy, ``distributedInfo.rank``
set), then runs, each in a fresh process with its peak RSS taken (``ru_maxrss`` of the
child and its children): the single-rank ``polyprof summary --json`` (the reference),
``polyprof convert`` of all ranks, ``polyprof summary STORE --json`` (one rank at a
time), with ``--dask local`` and 1 and 2 workers, and HTA (``TraceAnalysis`` on the same
folder, then its temporal breakdown) under an address-space limit of ``--hta-limit-gb``.
Every step has a time limit (``--timeout``). ``perfetto`` writes the largest shared trace
as Perfetto protobuf and as Chrome JSON, alternating, and reports sizes, and min and
median times and ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
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

#: Runs ``argv`` under an address-space limit (GB, 0: none); prints wall s and peak RSS (KiB).
_MEASURE = r"""
import json, resource, subprocess, sys, time
limit = float(sys.argv[1])
def pre():
    if limit:
        b = int(limit * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
t0 = time.perf_counter()
try:
    r = subprocess.run(sys.argv[3:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=float(sys.argv[2]), preexec_fn=pre)
    rc, err = r.returncode, r.stderr[-600:]
except subprocess.TimeoutExpired as e:
    rc, err = "timeout", ""
print(json.dumps({"s": time.perf_counter() - t0, "rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "rc": rc, "err": err}))
"""

#: HTA finds ranks with the regex '"rank":\\s+(\\d+)' (a space required after the colon);
#: the files are named by rank, so they are handed over as {rank: file}
_HTA = r"""
import logging, pathlib, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
files = {int(p.name.split("-")[1].split(".")[0]): str(p) for p in pathlib.Path(sys.argv[1]).glob("rank-*.json.gz")}
a = TraceAnalysis(trace_files=files)
assert len(a.t.traces) == len(files), (len(a.t.traces), len(files))
a.get_temporal_breakdown(visualize=False)
print(len(a.t.traces), "ranks", file=sys.stderr)
"""


SRC = str(ROOT / "src")


def measure(argv: list[str], timeout: float, limit_gb: float = 0, env: dict | None = None) -> dict:
    r = subprocess.run([sys.executable, "-c", _MEASURE, str(limit_gb), str(timeout), *argv], capture_output=True,
                       text=True, env=env or child_env(SRC), timeout=timeout + 60)
    return json.loads(r.stdout.strip().splitlines()[-1])


def polyprof_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "polyprof", *args]


# ----------------------------------------------------------------------------- rank files
def make_rank_files(out: Path, ranks: int, copies: int, src: Path = V100) -> list[Path]:
    """``ranks`` gzipped Kineto files, each ``copies`` copies of ``src``'s events in a row."""
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    body = []
    for k in range(copies):
        for e in events:
            if e.get("ph") == "M":
                if k == 0:
                    body.append(orjson.dumps(e))
                continue
            e = dict(e)
            if k:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = round(e["ts"] + k * span, 3)
                if "id" in e and isinstance(e["id"], int):
                    e["id"] += k << 40
                args = e.get("args")
                if isinstance(args, dict):
                    args = e["args"] = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += k << 40
            body.append(orjson.dumps(e))
    events_text = b"[" + b",\n".join(body) + b"]"
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(ranks):
        head = dict(doc, distributedInfo={**(doc.get("distributedInfo") or {}), "rank": r, "world_size": ranks})
        text = orjson.dumps(head)[:-1] + b', "traceEvents": ' + events_text + b"}"
        f = out / f"rank-{r}.json.gz"
        f.write_bytes(gzip.compress(text, compresslevel=1))
        files.append(f)
    return files


def ranks_bench(args: argparse.Namespace) -> None:
    global SRC
    SRC = args.src
    tmp = Path(args.workdir or tempfile.mkdtemp(prefix="polyprof-store-bench-"))
    t0 = time.perf_counter()
    files = sorted((tmp / "ranks").glob("rank-*.json.gz")) if args.reuse else []
    if len(files) != args.ranks:
        files = make_rank_files(tmp / "ranks", args.ranks, args.copies)
    json_bytes = len(gzip.decompress(files[0].read_bytes())) * len(files)
    print(f"# {args.ranks} ranks x {args.copies} copies of {V100.name}: {json_bytes / 1e9:.2f} GB of JSON "
          f"({sum(f.stat().st_size for f in files) / 1e6:.0f} MB gzipped), made in {time.perf_counter() - t0:.0f} s")
    print(f"# uptime: {os.popen('uptime').read().strip()}")
    store = tmp / "store"
    steps = [] if args.only_hta else [("summary of one rank (reference)", polyprof_cmd("summary", str(files[0]), "--json"), 0),
             ("convert all ranks (1 job)", polyprof_cmd("convert", *map(str, files), "-o", str(store),
                                                        "--overwrite"), 0),
             ("summary of the store (1 job)", polyprof_cmd("summary", str(store), "--json"), 0)]
    if not args.no_dask and not args.only_hta:
        steps += [(f"summary of the store, --dask local, {w} worker(s)",
                   polyprof_cmd("summary", str(store), "--json", "--dask", "local", "-j", str(w)), 0)
                  for w in (1, 2)]
    results = {}
    for name, argv, limit in steps:
        res = measure(argv, args.timeout, limit)
        results[name] = res
        _show(name, res)
    for name in ("convert all ranks (1 job)", "summary of the store (1 job)"):
        if name in results:
            ref = results["summary of one rank (reference)"]["rss_kib"]
            print(f"  {name}: peak RSS / single-rank summary = {results[name]['rss_kib'] / ref:.2f}x")
    if args.hta:
        res = measure([sys.executable, "-c", _HTA, str(tmp / "ranks")], args.timeout, args.hta_limit_gb,
                      env=child_env(None))
        _show(f"HTA TraceAnalysis + temporal breakdown (limit {args.hta_limit_gb} GB)", res)
    print(f"# uptime: {os.popen('uptime').read().strip()}")
    print(f"# files in {tmp}")


def _show(name: str, res: dict) -> None:
    rc = res["rc"]
    tail = res["err"].strip().splitlines()[-1:] if rc == 0 else []
    status = ("ok " + " ".join(tail)).strip() if rc == 0 else ("TIMEOUT" if rc == "timeout" else f"FAILED rc={rc}: {res['err'].strip()[-300:]}")
    print(f"{name:60s} {res['s']:8.1f} s  peak RSS {res['rss_kib'] / 1024:8.0f} MiB  {status}")


# ----------------------------------------------------------------------------- perfetto
_WRITE = r"""
import json, sys, time, logging
logging.disable(logging.CRITICAL)
import polyprof
from polyprof.formats import chrome
try:
    from polyprof.writers import perfetto
except ImportError:  # a tree from before the writers had their floor (issue 27)
    from polyprof.formats import perfetto
trace = polyprof.load(sys.argv[1])
len(trace.stats)  # decode deferred stats first: both writers need them
out = {}
for fmt in sys.argv[3:]:
    mod = perfetto if fmt == "perfetto" else chrome
    path = sys.argv[2] + (".pftrace" if fmt == "perfetto" else ".json")
    t0 = time.perf_counter()
    mod.write(trace, path)
    out[fmt] = time.perf_counter() - t0
print(json.dumps(out))
"""


def perfetto_bench(args: argparse.Namespace) -> None:
    src = Path(args.file)
    tmp = Path(tempfile.mkdtemp(prefix="polyprof-perfetto-bench-"))
    base = str(tmp / "out")
    env = child_env(str(ROOT / "src"))
    times: dict[str, list[float]] = {"perfetto": [], "chrome": []}
    print(f"# {src.name}; uptime: {os.popen('uptime').read().strip()}")
    for i in range(args.repeat):
        order = ["perfetto", "chrome"] if i % 2 == 0 else ["chrome", "perfetto"]
        r = subprocess.run([sys.executable, "-c", _WRITE, str(src), base, *order], capture_output=True, text=True,
                           env=env, timeout=600)
        got = json.loads(r.stdout.strip().splitlines()[-1])
        for k, v in got.items():
            times[k].append(v)
    size = {"perfetto": Path(base + ".pftrace").stat().st_size, "chrome": Path(base + ".json").stat().st_size}
    for k in ("perfetto", "chrome"):
        print(f"{k:9s} size {size[k] / 1e6:8.2f} MB  write min {min(times[k]) * 1e3:7.1f} ms  "
              f"median {statistics.median(times[k]) * 1e3:7.1f} ms")
    ratios = [c / p for p, c in zip(times["perfetto"], times["chrome"])]
    print(f"chrome/perfetto: size {size['chrome'] / size['perfetto']:.2f}x; write time min "
          f"{min(times['chrome']) / min(times['perfetto']):.2f}x, median of per-round ratios "
          f"{statistics.median(ratios):.2f}x ({args.repeat} rounds, alternating)")
    print(f"# uptime: {os.popen('uptime').read().strip()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("ranks")
    r.add_argument("--ranks", type=int, default=8)
    r.add_argument("--copies", type=int, default=1, help="copies of the V100 trace per rank (15 MB JSON each)")
    r.add_argument("--timeout", type=float, default=1800, help="seconds per step")
    r.add_argument("--hta", action="store_true", help="also run HTA on the same ranks")
    r.add_argument("--hta-limit-gb", type=float, default=8.0, help="HTA's address-space limit")
    r.add_argument("--no-dask", action="store_true")
    r.add_argument("--only-hta", action="store_true", help="run HTA only (with --reuse: on files made before)")
    r.add_argument("--reuse", action="store_true", help="reuse the rank files in --workdir if there are --ranks")
    r.add_argument("--workdir", help="where to put the rank files and the store (default: a new temp dir)")
    r.add_argument("--src", default=str(ROOT / "src"), help="the polyprof source tree to run (default: this one)")
    r.set_defaults(func=ranks_bench)
    f = sub.add_parser("perfetto")
    f.add_argument("file", nargs="?", default=str(V100))
    f.add_argument("--repeat", type=int, default=7)
    f.set_defaults(func=perfetto_bench)
    args = p.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
