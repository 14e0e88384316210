"""Nsight Systems SQLite read speed and memory, whole processes, against a pandas peer.

Issue 29's item 4: ``polyprof summary FILE.sqlite`` (and ``polyprof.load`` alone) at
100 MB of SQLite per second or more, with peak memory at most twice the file.

Makes a large export by replicating the rows of an export's event tables (``--fixture``;
``--tables all``: every table of events, so the file has the real export's mix, where
CPU samples and scheduling take most bytes; ``--tables read``: only the tables the
reader reads, kernels, copies, CUDA API calls, NVTX: its worst case; StringIds is not
replicated, as a longer run repeats the names it has), each copy shifted
in time by the export's span, its correlation ids and sample ids by a fixed step, so
every copy links up as the original does. Then times, in fresh processes alternating
with the peer:

- load: ``polyprof.load(file)``;
- summary: ``python -m polyprof summary file`` (the reader, every analysis and the
  terminal report: what a user runs);
- peer: what scripts and pipit's Nsight reader do: ``pandas.read_sql_query`` of each of
  those tables joined with ``StringIds`` (names), through the standard ``sqlite3``.

Reports MB of SQLite per second (file size / whole-process wall time, interpreter start
and imports included), the same per second of the process's CPU time (user + system:
what a shared machine's load does not stretch as much) and peak RSS / file size of each
process; min and median of ``--repeat`` rounds, the ratios to the peer, and the load
average.

    python bench/nsys_read.py [--fixture EXPORT] [--tables all|read] [--mb 200] [--repeat 5] [--keep FILE]
                              [--no-peer] [--baseline OTHER_CHECKOUT/src]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from child_env import child_env
from timed_child import run

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "nsys" / "saxpy_2022.sqlite"
#: the tables the reader reads events from (``--tables read`` replicates only these)
READ = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
TIMES = ("start", "end", "timestamp")  # shifted by the fixture's span per copy
IDS = ("id", "callchainId")  # shifted by ID_STEP per copy (primary keys of sampling tables)
CORR_STEP = 1000
ID_STEP = 1 << 24

POLYPROF = r"""
import sys, logging
logging.disable(logging.CRITICAL)
import polyprof
t = polyprof.load(sys.argv[1])
print(t.n_events)
"""

PEER = r"""
import sqlite3, sys
import pandas as pd
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
n = 0
for q in ('SELECT k.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName',
          'SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY',
          'SELECT r.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId',
          'SELECT n.*, s.value AS name FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId'):
    n += len(pd.read_sql_query(q, c))
print(n)
"""


def replicated_tables(c: sqlite3.Connection, which: str) -> list[str]:
    """``read``: the tables the reader reads; ``all``: every table of events with rows
    (those with a ``start`` column, and the call chains of samples)."""
    if which == "read":
        return list(READ)
    out = []
    for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        cols = [r[1] for r in c.execute(f"PRAGMA main.table_info({name})")]
        if ("start" in cols or name.endswith("_CALLCHAINS")) and c.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchone():
            out.append(name)
    return out


def make(out: Path, fixture: Path, mb: float, which: str) -> Path:
    """``fixture`` with the rows of its event tables replicated until the file is about ``mb`` MB."""
    shutil.copy(fixture, out)
    out.chmod(0o644)
    c = sqlite3.connect(out)
    span = c.execute('SELECT max("end") FROM CUPTI_ACTIVITY_KIND_RUNTIME').fetchone()[0] + 1
    tables = replicated_tables(c, which)
    for table in tables:
        c.execute(f"CREATE TEMP TABLE orig_{table} AS SELECT * FROM main.{table}")
    first = 50
    _replicate(c, tables, span, 1, first)
    c.commit()
    size = out.stat().st_size
    want = int(mb * 1e6)
    if size < want:
        base = fixture.stat().st_size
        _replicate(c, tables, span, first + 1, int((want - size) / max((size - base) / first, 1)))
        c.commit()
    c.close()
    return out


def _replicate(c: sqlite3.Connection, tables: list[str], span: int, first: int, n: int) -> None:
    """Copies ``first`` .. ``first + n - 1`` of the original rows."""
    c.execute("DROP TABLE IF EXISTS temp.reps")
    c.execute("CREATE TEMP TABLE reps (r INTEGER)")
    c.execute(f"WITH RECURSIVE s(r) AS (SELECT {first} UNION ALL SELECT r + 1 FROM s WHERE r < {first + n - 1}) "
              "INSERT INTO temp.reps SELECT r FROM s")
    for table in tables:
        cols = [r[1] for r in c.execute(f"PRAGMA main.table_info({table})")]
        sel = []
        for col in cols:
            q = f't."{col}"'
            if col in TIMES:
                sel.append(f"{q} + reps.r * {span}")
            elif col == "correlationId":
                sel.append(f"{q} + reps.r * {CORR_STEP}")
            elif col in IDS:
                sel.append(f"{q} + reps.r * {ID_STEP}")
            else:
                sel.append(q)
        c.execute(f"INSERT INTO main.{table} SELECT {', '.join(sel)} FROM temp.reps, temp.orig_{table} AS t "
                  "ORDER BY reps.r")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of the replicated file (default 200 MB)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="make the file here and keep it (reused when it exists)")
    ap.add_argument("--fixture", type=Path, default=FIXTURE,
                    help="the export to replicate (default: the trimmed fixture of tests/data/nsys)")
    ap.add_argument("--tables", choices=("all", "read"), default="all",
                    help="replicate every event table (default, a real export's mix) or only those the reader "
                         "reads (its worst case)")
    ap.add_argument("--no-peer", action="store_true", help="leave the pandas peer out (it takes minutes)")
    ap.add_argument("--baseline", type=Path, help="another checkout's src/ (say, before a change): its load and "
                                                  "summary are timed too, in the same rounds")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nsys-bench-"))
    path = args.keep or tmp / "replicated.sqlite"
    if not path.exists():
        t0 = time.perf_counter()
        make(path, args.fixture, args.mb, args.tables)
        print(f"made {path} in {time.perf_counter() - t0:.1f} s")
    size = path.stat().st_size
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in READ}
    c.close()
    print(f"file: {size / 1e6:.1f} MB ({args.fixture.name} replicated, tables: {args.tables}); rows read: "
          + ", ".join(f"{t.split('_')[-1].lower()} {n:,}" for t, n in rows.items()))
    env_p = child_env(str(ROOT / "src"))
    tools = {"load": (["-c", POLYPROF, str(path)], env_p), "summary": (["-m", "polyprof", "summary", str(path)], env_p)}
    if args.baseline:
        env_b = child_env(str(args.baseline.resolve()))
        tools["load-base"] = (["-c", POLYPROF, str(path)], env_b)
        tools["summary-base"] = (["-m", "polyprof", "summary", str(path)], env_b)
    if not args.no_peer:
        tools["peer"] = (["-c", PEER, str(path)], child_env(None))
    for argv, env in tools.values():  # warm-up: bytecode, page cache
        run(argv, env)
    load0 = os.getloadavg()
    res: dict[str, list[tuple[float, float, int]]] = {k: [] for k in tools}
    for _ in range(args.repeat):
        for k, (argv, env) in tools.items():
            res[k].append(run(argv, env))
    load1 = os.getloadavg()
    print(f"{args.repeat} whole processes each, alternating; load average {load0[0]:.1f} -> {load1[0]:.1f}")
    print(f"  {'process':<12} {'wall min':>9} {'median':>8} {'MB/s best':>10} {'MB/s med':>9} {'CPU min':>8} "
          f"{'MB/CPU-s':>9} {'RSS max':>9} {'RSS/file':>9}")
    for k, v in res.items():
        walls, cpus = [w for w, _, _ in v], [u for _, u, _ in v]
        rss = max(r for _, _, r in v)
        print(f"  {k:<12} {min(walls):>8.2f}s {statistics.median(walls):>7.2f}s {size / 1e6 / min(walls):>10.0f} "
              f"{size / 1e6 / statistics.median(walls):>9.0f} {min(cpus):>7.2f}s {size / 1e6 / min(cpus):>9.0f} "
              f"{rss / 1e6:>7.0f}MB {rss / size:>9.2f}")
    if "peer" in res:
        q = [w for w, _, _ in res["peer"]]
        for k in ("load", "summary"):
            ratios = [w / b for (w, _, _), b in zip(res[k], q)]
            print(f"  {k} / peer wall time: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
