"""Compare what two polyprof source trees print for the real traces in tests/data.

    python scripts/compare_outputs.py BEFORE_SRC [AFTER_SRC]

runs ``polyprof summary`` (terminal text, ``--json``, ``--json --all-steps``),
``polyprof report`` (the HTML page) and the export formats that read analyses, for
every trace file in tests/data and for the two-rank job of the sampled ranks (as
files and as a store the tree before converts them to), once
with each tree on ``PYTHONPATH``, and reports every output that is not byte for byte
the same. AFTER_SRC defaults to this checkout's ``src``. Exit status 1 on a
difference. Used to check that a change of internals (issue 27's one table type) left
the outputs alone.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: every trace file in tests/data (the fuzz corpus and XProf's op_stats protobuf are not traces)
TRACES = sorted(p for p in (ROOT / "tests" / "data").rglob("*") if "corpus" not in p.parts and p.is_file()
                and p.name.endswith((".json.gz", ".xplane.pb", ".sqlite", ".json.xz")))
RANKS = [ROOT / "tests/data/traces/kineto/sampled_rank0.json.gz", ROOT / "tests/data/traces/kineto/sampled_rank1.json.gz"]

log = logging.getLogger("compare_outputs")


def cases(store: Path) -> list[tuple[str, list[str], str | None]]:
    """(name, polyprof arguments with ``{out}`` for an output file, output suffix or None
    for stdout); ``store``: the two ranks converted to a store."""
    out: list[tuple[str, list[str], str | None]] = []
    for t in TRACES:
        n = t.name
        out += [(f"summary {n}", ["summary", str(t)], None),
                (f"summary --json {n}", ["summary", str(t), "--json"], None),
                (f"summary --json --all-steps {n}", ["summary", str(t), "--json", "--all-steps"], None),
                (f"report {n}", ["report", str(t), "-o", "{out}"], ".html")]
    job = [str(p) for p in RANKS]
    out += [("summary ranks", ["summary", *job], None),
            ("summary --json ranks", ["summary", *job, "--json"], None),
            ("report ranks", ["report", *job, "-o", "{out}"], ".html"),
            ("summary store", ["summary", str(store)], None),
            ("summary --json store", ["summary", str(store), "--json"], None),
            ("report store", ["report", str(store), "-o", "{out}"], ".html")]
    return out


def run(src: Path, args: list[str], suffix: str | None, tmp: Path) -> bytes:
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "160", "TERM": "dumb", "NO_COLOR": "1"}
    out = tmp / f"out{suffix}" if suffix else None
    argv = [a.replace("{out}", str(out)) for a in args]
    r = subprocess.run([sys.executable, "-m", "polyprof", *argv], env=env, capture_output=True, cwd=tmp)
    if r.returncode:
        return b"EXIT %d\n" % r.returncode + r.stdout + r.stderr
    data = out.read_bytes() if out is not None else r.stdout
    if out is not None:
        out.unlink()
    return data


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path, nargs="?", default=ROOT / "src")
    p.add_argument("-k", default="", help="only the cases whose name contains this")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        store = tmp / "job.store"  # written once, by the tree before
        made = run(a.before, ["convert", *map(str, RANKS), "-o", str(store)], None, tmp)
        if not store.is_dir():
            log.error("could not convert the ranks to a store: %s", made.decode("utf-8", "replace")[-2000:])
            return 2
        for name, args, suffix in cases(store):
            if a.k not in name:
                continue
            before = run(a.before, args, suffix, tmp)
            after = run(a.after, args, suffix, tmp)
            same = before == after
            log.info("%-4s %-60s %8d bytes  %s", "same" if same else "DIFF", name, len(after),
                     hashlib.sha256(after).hexdigest()[:12])
            if not same:
                bad += 1
                diff = difflib.unified_diff(before.decode("utf-8", "replace").splitlines(),
                                            after.decode("utf-8", "replace").splitlines(), "before", "after",
                                            lineterm="", n=1)
                for line in list(diff)[:40]:
                    log.info("     %s", line[:300])
    log.info("%d output(s) differ", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
