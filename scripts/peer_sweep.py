"""Run polyprof as a user would on every trace under a directory of peers' test data.

    python scripts/peer_sweep.py DIR                   # every command on every file
    python scripts/peer_sweep.py DIR --only summary    # one command (repeatable)
    python scripts/peer_sweep.py DIR --json out.json   # every outcome, for docs/peer_data.md

DIR holds peers' files as fetched (HolisticTraceAnalysis' tests/data, TraceLens' tests,
XProf's test XSpaces, ...). For each file: ``polyprof summary``, ``summary --json``, ``summary --window hta``,
``report``, ``export -f perfetto|xspace|kineto`` and ``critical-path``; for each directory
of rank files (names with ``rank<N>``/``rank-<N>``/``rank_<N>``): ``summary DIR``, ``convert`` to a store,
``summary STORE`` and ``critical-path DIR``; for each pair (two files of the same name
in two directories, e.g. TraceLens' h100/ and mi300/, or a directory of exactly two
files, e.g. HTA's trace_diff control/ and test/): ``diff``. Each command is one process
under a time limit (``--timeout``, 120 s), and its peak resident memory is read from the
kernel (each process's ``VmHWM``, polled; the largest of the process and its children).

Each outcome is one of:

- ``ok``: exit status 0, the output written where one was asked for;
- ``refused``: exit status 1 and one line ``polyprof: error: <file>: <what>`` naming the
  input (a ``PolyprofError``: ``src/polyprof/errors.py``; the CLI's exit status 1);
- ``WRONG``: anything else: a traceback, ``internal error``, a time-out, a signal, an
  output missing after exit 0.

Whether a refusal is right (the file is not a format polyprof claims to read,
docs/formats.md) is for the reader of the table to judge; the line is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

#: file endings tried as traces (others, e.g. sources and licences, are skipped)
TRACE_ENDINGS = (".json", ".json.gz", ".gz", ".xz", ".pb", ".pb.gz", ".db", ".sqlite",
                 ".sqlite3", ".pftrace", ".perfetto-trace", ".trace", ".otf2", ".polyprof",
                 ".parquet", ".rpd")
RANK_NAME = re.compile(r"rank[-_]?\d+", re.IGNORECASE)
FILE_COMMANDS = ("summary", "summary-json", "summary-hta", "report", "export-perfetto", "export-xspace",
                 "export-kineto", "critical-path")
DIR_COMMANDS = ("summary-dir", "convert", "summary-store", "critical-path-dir")
PAIR_COMMANDS = ("diff",)


def is_trace(path: Path, endings: tuple[str, ...]) -> bool:
    name = path.name.lower()
    return path.is_file() and not name.startswith("license") and name.endswith(endings)


def find_cases(root: Path, endings: tuple[str, ...]) -> tuple[list[Path], list[Path],
                                                               list[tuple[Path, Path]]]:
    """The files, the rank directories and the pairs to diff under ``root``."""
    files = sorted(p for p in root.rglob("*") if is_trace(p, endings))
    by_dir: dict[Path, list[Path]] = defaultdict(list)
    by_name: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        by_dir[f.parent].append(f)
        by_name[f.name].append(f)
    rank_dirs = sorted(d for d, fs in by_dir.items()
                       if sum(bool(RANK_NAME.search(f.name)) for f in fs) >= 2)
    pairs = [(fs[0], fs[1]) for fs in by_name.values() if len(fs) == 2]
    pairs += [(fs[0], fs[1]) for d, fs in by_dir.items() if len(fs) == 2 and d not in rank_dirs]
    # a directory holding exactly two directories of one file each (HTA's control/ test/)
    for d in sorted({f.parent.parent for f in files}):
        subs = [s for s in sorted(d.iterdir()) if s.is_dir()]
        singles = [by_dir[s][0] for s in subs if len(by_dir.get(s, ())) == 1]
        if len(subs) == 2 and len(singles) == 2:
            pairs.append((singles[0], singles[1]))
    seen: set[tuple[Path, Path]] = set()
    unique = [p for p in pairs if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]
    return files, rank_dirs, unique


def command_line(command: str, target: Path | tuple[Path, Path], out: Path) -> tuple[list[str], Path | None]:
    """The polyprof arguments for one command, and the output it should write."""
    if isinstance(target, tuple):
        return ["diff", str(target[0]), str(target[1])], None
    t = str(target)
    table: dict[str, tuple[list[str], Path | None]] = {
        "summary": (["summary", t], None),
        "summary-json": (["summary", "--json", t], None),
        "summary-hta": (["summary", "--window", "hta", t], None),
        "report": (["report", t, "-o", str(out / "r.html")], out / "r.html"),
        "export-perfetto": (["export", "-f", "perfetto", t, "-o", str(out / "t.pftrace")],
                            out / "t.pftrace"),
        "export-xspace": (["export", "-f", "xspace", t, "-o", str(out / "t.xplane.pb")],
                          out / "t.xplane.pb"),
        "export-kineto": (["export", "-f", "kineto", t, "-o", str(out / "t.json")], out / "t.json"),
        "critical-path": (["critical-path", t], None),
        "critical-path-dir": (["critical-path", t], None),
        "summary-dir": (["summary", t], None),
        "convert": (["convert", t, "-o", str(out / "store")], out / "store"),
        "summary-store": (["summary", str(out / "store")], None),
    }
    return table[command]


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _peak_kib(pids: list[int]) -> int:
    """The largest high-water resident memory (VmHWM) of these processes, KiB: each
    process's own, after its exec (``wait4``'s maxrss would carry the forking parent's)."""
    peak = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
    return peak


#: each export opened by the peer that reads it, in a process of its own; prints what it saw
PEER_OPEN = {
    "export-perfetto": """
import sys
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
t = Trace()
t.ParseFromString(open(sys.argv[1], "rb").read())
n = sum(p.HasField("track_event") for p in t.packet)
assert t.packet, "no packets"
print(f"perfetto protos: {len(t.packet)} packets, {n} track events")
""",
    "export-xspace": """
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "trace_viewer", {"use_saved_result": False})
assert data is not None, "xprof trace_viewer gave nothing"
ev = json.loads(data)["traceEvents"]
print(f"xprof trace_viewer: {sum(e.get('ph') == 'X' for e in ev)} X events")
""",
    "export-kineto": """
import contextlib, io, logging, os, shutil, sys, tempfile, warnings
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(d, "rank0.json"))
with contextlib.redirect_stdout(io.StringIO()):
    a = TraceAnalysis(trace_dir=d)
df = a.t.get_trace(next(iter(a.t.traces)))
print(f"HTA: {len(df)} events")
""",
}


def peer_open(command: str, output: Path, timeout: float) -> tuple[bool, str]:
    """Whether the peer opens ``output`` (and what it saw, or its last error line)."""
    try:
        p = subprocess.run([sys.executable, "-c", PEER_OPEN[command], str(output)], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "peer timed out opening it"
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode == 0, lines[-1] if lines else ""


def run_one(argv: list[str], timeout: float) -> tuple[int | None, str, str, int, float]:
    """(exit status or None on time-out, stdout tail, stderr, peak RSS in KiB, seconds)."""
    cmd = [sys.executable, "-m", "polyprof", *argv]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True)
        rc: int | None = None
        rss = 0
        while rc is None:
            rss = max(rss, _peak_kib(_tree(proc.pid)))
            try:
                rc = proc.wait(0.01)
            except subprocess.TimeoutExpired:
                if time.perf_counter() > t0 + timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    return rc, stdout[-2000:], stderr, rss, seconds


def classify(rc: int | None, stderr: str, output: Path | None, inputs: list[Path]) -> tuple[str, str]:
    """(outcome, the line that says why)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if rc is None:
        return "WRONG", "timed out"
    if "Traceback (most recent call last)" in stderr:
        return "WRONG", "traceback: " + last
    if rc == 0:
        if output is not None and not output.exists():
            return "WRONG", f"exit 0 but no {output.name}"
        warn = next((ln for ln in lines if "warning" in ln.lower()), "")
        return "ok", warn
    if rc == 1 and last.startswith("polyprof: error:") and "internal error" not in last:
        named = any(str(p) in last or p.name in last for p in inputs)
        return ("refused", last) if named else ("WRONG", "refusal not naming the file: " + last)
    return "WRONG", f"exit {rc}: {last}"


def sweep(root: Path, only: set[str], timeout: float, endings: tuple[str, ...],
          verify: bool = False) -> list[dict]:
    files, rank_dirs, pairs = find_cases(root, endings)
    work: list[tuple[str, Path | tuple[Path, Path]]] = []
    work += [(c, f) for f in files for c in FILE_COMMANDS if not only or c in only]
    work += [(c, d) for d in rank_dirs for c in DIR_COMMANDS if not only or c in only]
    work += [(c, p) for p in pairs for c in PAIR_COMMANDS if not only or c in only]
    results = []
    scratch = Path(tempfile.mkdtemp(prefix="peer_sweep_"))
    try:
        for i, (command, target) in enumerate(work):
            out = scratch / (str(i) if command != "summary-store" else _store_dir(results, target))
            out.mkdir(parents=True, exist_ok=True)
            argv, output = command_line(command, target, out)
            rc, stdout, stderr, rss, seconds = run_one(argv, timeout)
            inputs = list(target) if isinstance(target, tuple) else [target]
            outcome, why = classify(rc, stderr, output, inputs)
            if verify and outcome == "ok" and command in PEER_OPEN and output is not None:
                opened, seen = peer_open(command, output, timeout)
                outcome, why = ("ok", seen) if opened else ("WRONG", "the peer cannot open it: " + seen)
            name = " vs ".join(str(p.relative_to(root)) for p in inputs)
            results.append({"target": name, "command": command, "argv": argv, "outcome": outcome,
                            "why": why, "rc": rc, "peak_rss_mib": round(rss / 1024, 1),
                            "seconds": round(seconds, 2), "out": out.name})
            print(f"{outcome:8} {command:18} {seconds:6.1f}s {rss / 1024:7.0f} MiB  {name}"
                  + (f"\n         {why}" if why else ""), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _store_dir(results: list[dict], target: object) -> str:
    """The scratch folder of this rank directory's ``convert`` (its store is summarised)."""
    for r in reversed(results):
        if r["command"] == "convert":
            return r["out"]
    return "none"


def table(results: list[dict]) -> str:
    """One markdown row per target: each command's outcome."""
    commands = [c for c in (*FILE_COMMANDS, *DIR_COMMANDS, *PAIR_COMMANDS)
                if any(r["command"] == c for r in results)]
    rows: dict[str, dict[str, str]] = defaultdict(dict)
    for r in results:
        rows[r["target"]][r["command"]] = r["outcome"]
    head = "| file | " + " | ".join(commands) + " |\n|---|" + "---|" * len(commands) + "\n"
    return head + "".join(f"| {t} | " + " | ".join(v.get(c, "") for c in commands) + " |\n"
                          for t, v in rows.items())


def table_by_peer(results: list[dict]) -> str:
    """One markdown row per peer (the first folder under DIR): per command, how many runs
    were ok / refused / WRONG."""
    commands = [c for c in (*FILE_COMMANDS, *DIR_COMMANDS, *PAIR_COMMANDS)
                if any(r["command"] == c for r in results)]
    counts: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    files: dict[str, set[str]] = defaultdict(set)
    for r in results:
        peer = r["target"].split("/")[0]
        counts[peer][r["command"]][r["outcome"]] += 1
        files[peer].add(r["target"])

    def cell(c: dict[str, int]) -> str:
        return " / ".join(str(c.get(k, 0)) for k in ("ok", "refused", "WRONG")) if c else ""

    head = ("| peer (targets) | " + " | ".join(commands) + " |\n|---|" + "---|" * len(commands) + "\n")
    return head + "".join(f"| {p} ({len(files[p])}) | " + " | ".join(cell(counts[p][c]) for c in commands) + " |\n"
                          for p in sorted(counts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--only", action="append", default=[],
                    choices=[*FILE_COMMANDS, *DIR_COMMANDS, *PAIR_COMMANDS])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--ext", action="append", default=[],
                    help="file ending to try as a trace (default: the usual trace endings)")
    ap.add_argument("--json", type=Path, help="write every outcome here")
    ap.add_argument("--verify", action="store_true",
                    help="open each export with its peer: Perfetto's protos, XProf's trace_viewer, HTA")
    ap.add_argument("--markdown", action="store_true", help="print the table of outcomes")
    ap.add_argument("--by-peer", action="store_true",
                    help="print ok / refused / WRONG counts per peer and command (docs/peer_data.md)")
    args = ap.parse_args()
    load = os.getloadavg()
    results = sweep(args.dir.resolve(), set(args.only), args.timeout,
                    tuple(args.ext) or TRACE_ENDINGS, args.verify)
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("ok", "refused", "WRONG")}
    print(f"{len(results)} runs: {counts}; load average before {load[0]:.2f}, "
          f"after {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.markdown:
        print(table(results))
    if args.by_peer:
        print(table_by_peer(results))
    return 1 if counts["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
