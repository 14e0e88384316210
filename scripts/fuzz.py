"""Long-run fuzzing of polyprof's readers (docs/reliability.md records the runs).

    python scripts/fuzz.py --count 100000 --workers 2 --seed 1 --save tests/data/corpus/found
    python scripts/fuzz.py --seconds 600 --readers kineto,xspace

Every input is a seeded structure-aware mutation of a real trace (tests/fuzz), loaded
in a worker process; one in ``--deep-every`` that loads is also summarised, reported
and exported. Prints one JSON line per reader (inputs, outcomes, findings) and exits 1
if any input leaked a foreign exception, killed a worker or hung. ``--save`` keeps
those inputs (put them under tests/data/corpus/ once fixed: the corpus test replays
every file there).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

from fuzz import runner, seeds  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readers", default=",".join(seeds.READERS), help="comma-separated (default: all)")
    p.add_argument("--count", type=int, help="inputs per reader")
    p.add_argument("--seconds", type=float, help="time per reader")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="first input index (to continue a run)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--deep-every", type=int, default=25, help="summary/report/export every Nth input (0: never)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before an input counts as a hang")
    p.add_argument("--save", type=Path, help="directory for inputs that broke a reader")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = p.parse_args(argv)
    if args.count is None and args.seconds is None:
        p.error("give --count or --seconds")
    results = []
    for reader in args.readers.split(","):
        t = time.time()
        res = runner.run(reader, seed=args.seed, count=args.count, seconds=args.seconds, workers=args.workers,
                         deep_every=args.deep_every, timeout=args.timeout, save_dir=args.save, start=args.start,
                         progress=True)
        d = res.to_dict()
        d["started"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
        results.append(d)
        print(json.dumps({k: v for k, v in d.items() if k != "findings"}
                         | {"findings": len(d["findings"])}), flush=True)
        for f in d["findings"][:20]:
            print("   ", json.dumps(f), flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))
    broken = sum(r["outcomes"].get(k, 0) for r in results for k in ("bug", "crash", "hang", "differs"))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
