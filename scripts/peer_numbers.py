"""polyprof's numbers against each peer's own reading of the same file, under a directory
of peers' test data (the one scripts/peer_sweep.py runs on; docs/peer_data.md).

    python scripts/peer_numbers.py DIR                 # every check that applies
    python scripts/peer_numbers.py DIR --only hta      # hta | xprof | nsys | tracelens

- **hta**: each Kineto JSON: HTA's ``get_gpu_kernel_breakdown`` kernel-type table (µs)
  against ``polyprof summary --json --window hta`` (``kernel_state_breakdown``), totals;
- **xprof**: each ``.xplane.pb``: XProf's ``kernel_stats`` (count, total µs) against
  ``polyprof sql`` over the kernels;
- **nsys**: each Nsight Systems SQLite: count and summed ``end - start`` of its kernel
  and memcpy tables against ``polyprof sql``;
- **tracelens**: each trace beside a TraceLens perf report (``<trace>_perf_report_csvs/``
  or ``perf_csvs/``): its ``gpu_timeline.csv`` total, busy and idle time against ``polyprof
  summary --json --all-steps --span device`` (``temporal_breakdown``).

Each peer runs in a process of its own; a file the peer cannot read is listed as such.
One line per file: ``equal``, ``DIFFERS`` (both numbers shown) or ``peer failed``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

_HTA = r"""
import contextlib, io, json, logging, shutil, sys, tempfile, warnings
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
shutil.copy(sys.argv[1], d)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    kt, _ = TraceAnalysis(trace_dir=d).get_gpu_kernel_breakdown(visualize=False)
print(json.dumps(sum(int(v) for v in kt["sum"])))
"""

_XPROF = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "kernel_stats", {"use_saved_result": False})
doc = json.loads(data)
doc = doc[0] if isinstance(doc, list) else doc
cols = [c["id"] for c in doc["cols"]]
t, n = cols.index("total_duration_us"), cols.index("occurrences")
print(json.dumps([sum(int(r["c"][n]["v"]) for r in doc["rows"]), sum(float(r["c"][t]["v"]) for r in doc["rows"])]))
"""

_KERNELS = "SELECT count(*), coalesce(sum(dur_ns), 0) FROM events WHERE category = 'kernel'"


def _run(argv: list[str], timeout: float = 300) -> tuple[bool, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    out = p.stdout.strip()
    return p.returncode == 0, out if p.returncode == 0 else (p.stderr.strip().splitlines() or [""])[-1]


def _polyprof(*argv: str) -> tuple[bool, str]:
    return _run([sys.executable, "-m", "polyprof", *argv])


def _sql(path: Path, query: str) -> list[float]:
    ok, out = _polyprof("sql", "--csv", str(path), query)
    if not ok:
        raise RuntimeError(out)
    return [float(x) for x in out.splitlines()[-1].replace('"', "").split(",")]


def check_hta(path: Path) -> tuple[str, object, object]:
    ok, out = _run([sys.executable, "-c", _HTA, str(path)])
    if not ok:
        return "peer failed", out[:120], None
    okp, doc = _polyprof("summary", "--json", "--window", "hta", str(path))
    if not okp:
        return "polyprof failed", None, doc
    rows = json.loads(doc)["tables"]["kernel_state_breakdown"]["records"]
    got = sum(r["time_ns"] for r in rows if r["state"] != "idle") / 1000
    want = json.loads(out)
    return ("equal" if abs(got - want) <= 1 else "DIFFERS"), want, got


def check_xprof(path: Path) -> tuple[str, object, object]:
    ok, out = _run([sys.executable, "-c", _XPROF, str(path)])
    if not ok:
        return "peer failed", out[:120], None
    n, total_us = json.loads(out.splitlines()[-1])
    got_n, got_ns = _sql(path, _KERNELS)
    same = n == got_n and abs(total_us * 1000 - got_ns) < 1
    return ("equal" if same else "DIFFERS"), (n, round(total_us, 3)), (int(got_n), got_ns / 1000)


def check_nsys(path: Path) -> tuple[str, object, object]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    want, got = [], []
    for table, cat in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy")):
        if table in tables:
            n, s = db.execute(f"SELECT count(*), coalesce(sum(end - start), 0) FROM {table}").fetchone()
            want.append((n, s))
            q = f"SELECT count(*), coalesce(sum(dur_ns), 0) FROM events WHERE category = '{cat}'"
            got.append(tuple(int(x) for x in _sql(path, q)))
    if not want:
        return "peer failed", "no kernel or memcpy table", None
    return ("equal" if want == got else "DIFFERS"), want, got


def _tracelens_report(path: Path) -> Path | None:
    name = path.name.removesuffix(".json.gz").removesuffix(".json")
    for d in (path.parent / f"{name}_perf_report_csvs", path.parent / "perf_csvs"):
        if (d / "gpu_timeline.csv").exists():
            return d / "gpu_timeline.csv"
    return None


def check_tracelens(path: Path) -> tuple[str, object, object]:
    csv_path = _tracelens_report(path)
    assert csv_path is not None
    tl = {r["type"]: float(r["time ms"]) for r in csv.DictReader(csv_path.open())}
    ok, doc = _polyprof("summary", "--json", "--all-steps", "--span", "device", str(path))
    if not ok:
        return "polyprof failed", None, doc
    rows = [r for r in json.loads(doc)["tables"]["temporal_breakdown"]["records"] if r["stream"] == "(all streams)"]
    got = {"total": sum(r["span_ns"] for r in rows) / 1e6, "busy": sum(r["busy_ns"] for r in rows) / 1e6,
           "idle": sum(r["idle_ns"] for r in rows) / 1e6}
    want = {"total": tl["total_time"], "busy": tl["busy_time"], "idle": tl["idle_time"]}
    same = all(abs(got[k] - want[k]) <= 0.002 for k in want)  # ms: TraceLens rounds through floats
    return ("equal" if same else "DIFFERS"), {k: round(v, 4) for k, v in want.items()}, \
        {k: round(v, 4) for k, v in got.items()}


def _text(path: Path) -> bytes:
    import gzip

    with (gzip.open(path) if path.name.endswith(".gz") else open(path, "rb")) as f:
        return f.read(64 << 20)


def checks_for(path: Path) -> list[str]:
    name = path.name
    if name.endswith(".xplane.pb"):
        return ["xprof"]
    if name.endswith((".sqlite", ".sqlite3")):
        with open(path, "rb") as f:
            return ["nsys"] if f.read(16) == b"SQLite format 3\x00" else []
    if name.endswith((".json", ".json.gz")):
        try:
            text = _text(path)
        except OSError:
            return []
        if b'"traceEvents"' not in text or b'"ph"' not in text:  # Kineto's layout, with events
            return []
        return ["hta"] + (["tracelens"] if _tracelens_report(path) else [])
    return []


CHECKS = {"hta": check_hta, "xprof": check_xprof, "nsys": check_nsys, "tracelens": check_tracelens}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--only", action="append", default=[], choices=sorted(CHECKS))
    args = ap.parse_args()
    load = os.getloadavg()
    counts: dict[str, int] = {}
    for path in sorted(p for p in args.dir.rglob("*") if p.is_file()):
        for check in checks_for(path):
            if args.only and check not in args.only:
                continue
            try:
                outcome, want, got = CHECKS[check](path)
            except Exception as e:  # noqa: BLE001 - one line per file, the sweep goes on
                outcome, want, got = "polyprof failed", None, f"{type(e).__name__}: {e}"
            counts[f"{check} {outcome}"] = counts.get(f"{check} {outcome}", 0) + 1
            print(f"{check:9} {outcome:15} {path.relative_to(args.dir)}  peer={want} polyprof={got}", flush=True)
    print(f"{counts}; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    return 1 if any("DIFFERS" in k or "polyprof failed" in k for k in counts) else 0


if __name__ == "__main__":
    sys.exit(main())
