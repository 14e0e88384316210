"""Mutated inputs through the whole command, as a user runs it: ``polyprof summary FILE``
in a child process under a memory limit (RLIMIT_AS) and a timeout, once with the
compiled readers and once with ``POLYPROF_PURE_PYTHON=1``.

    python scripts/fuzz_cli.py --readers nsys,rocpd,kineto --count 200 --seed 1 --mem-mb 3072

Each run is ``ok`` (exit 0), ``clean`` (exit 1 and one line on stderr, polyprof's
``polyprof: error:`` naming the file) or ``bad`` (a traceback, a signal, more lines, a
hang, the memory limit); the two runs of an input must both be ok with the same output,
or both clean ("differs" otherwise; "damaged-differs" where SQLite's integrity_check
calls the file corrupt, see tests/fuzz/runner.py). Prints one JSON line per reader and
exits 1 on any bad run or difference. Inputs are tests/fuzz's (mutators.mutate).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

from fuzz import mutators, seeds  # noqa: E402
from fuzz.runner import _damaged  # noqa: E402


def summary(path: Path, pure: bool, mem_mb: int, timeout: float) -> tuple[str, str]:
    """(outcome, stdout or the reason) of ``polyprof summary path``."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))

    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), POLYPROF_PURE_PYTHON="1" if pure else "0",
               OMP_NUM_THREADS="1", COLUMNS="120")
    try:
        r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                           errors="replace", timeout=timeout, env=env, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return "bad", f"no answer in {timeout:.0f} s"
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    if r.returncode == 0:
        return "ok", r.stdout
    if r.returncode == 1 and len(lines) == 1 and lines[0].startswith("polyprof: error:") and str(path) in lines[0]:
        return "clean", lines[0]
    return "bad", f"exit {r.returncode}: " + " | ".join(lines[-3:])[:400]


def one(reader: str, all_seeds: list[tuple[str, bytes]], seed: int, index: int, tmp: Path, mem_mb: int,
        timeout: float, save: Path | None) -> tuple[str, dict]:
    src, data = mutators.mutate(reader, all_seeds, seed, index)
    suffix = next(s for s in sorted(seeds.READERS[reader], key=len, reverse=True) if src.endswith(s))
    path = tmp / f"{reader}-{index}{suffix}"
    path.write_bytes(data)
    try:
        (a, out_a), (b, out_b) = (summary(path, pure, mem_mb, timeout) for pure in (False, True))
        if "bad" in (a, b):
            kind, detail = "bad", out_a if a == "bad" else "pure: " + out_b
        elif a == b == "clean" or (a == b == "ok" and out_a == out_b):
            kind, detail = a, ""
        else:
            kind = "damaged-differs" if _damaged(path) else "differs"
            detail = f"compiled {a}, pure {b}" + (": outputs differ" if a == b else "")
        if save is not None and kind in ("bad", "differs"):
            save.mkdir(parents=True, exist_ok=True)
            (save / f"cli-{reader}-s{seed}-i{index}-{kind}{suffix}").write_bytes(data)
        return kind, {"index": index, "outcome": kind, "detail": detail}
    finally:
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readers", default="nsys,rocpd,kineto")
    p.add_argument("--count", type=int, default=100, help="inputs per reader")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mem-mb", type=int, default=3072, help="RLIMIT_AS of each run")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--save", type=Path, help="directory for inputs with a bad run or a difference")
    args = p.parse_args(argv)
    broken = 0
    for reader in args.readers.split(","):
        t = time.time()
        all_seeds = seeds.load_seeds((reader,) if reader in seeds.BUILT else ())[reader]
        counts: Counter = Counter()
        findings = []
        with tempfile.TemporaryDirectory(prefix="polyprof-fuzzcli-") as tmp, \
                ThreadPoolExecutor(args.workers) as pool:
            jobs = [pool.submit(one, reader, all_seeds, args.seed, i, Path(tmp), args.mem_mb, args.timeout, args.save)
                    for i in range(args.count)]
            for j in jobs:
                kind, d = j.result()
                counts[kind] += 1
                if kind in ("bad", "differs"):
                    findings.append(d)
        broken += counts["bad"] + counts["differs"]
        print(json.dumps({"reader": reader, "seed": args.seed, "inputs": args.count, "outcomes": dict(counts),
                          "seconds": round(time.time() - t, 1), "mem_mb": args.mem_mb}), flush=True)
        for f in findings[:20]:
            print("   ", json.dumps(f), flush=True)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
