"""Count ``typing.Any`` in src/polyprof per 1,000 lines, and fail above the limit.

Counted: every use of the name ``Any`` (or ``typing.Any``) in the code, annotations and
casts alike, not the imports. Lines: every line of every .py file under src/polyprof
(generated protobuf modules left out). .ci/run runs it.

    python scripts/count_any.py [--limit N] [--top K]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "polyprof"
#: the most Any per 1,000 lines CI accepts; lower it as modules are typed. Issue 27's goal
#: was 17 (half of the 34 it found); it ended at 12.8, and the limit keeps a little room
#: for the work then under way. See docs/architecture.md, "Types"
LIMIT = 15.0
GOAL = 17.0


def count(path: Path) -> int:
    n = 0
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name) and node.id == "Any":
            n += 1
        elif isinstance(node, ast.Attribute) and node.attr == "Any" and isinstance(node.value, ast.Name) \
                and node.value.id in ("typing", "t"):
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=float, default=LIMIT, help=f"Any per 1,000 lines (default {LIMIT:g})")
    p.add_argument("--top", type=int, default=0, help="also list the K modules with the most Any")
    args = p.parse_args(argv)
    per: dict[str, int] = {}
    lines = 0
    for path in sorted(SRC.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        lines += len(path.read_text().splitlines())
        per[str(path.relative_to(SRC.parent))] = count(path)
    total = sum(per.values())
    rate = 1000 * total / max(lines, 1)
    print(f"Any: {total} in {lines} lines of src/: {rate:.1f} per 1,000 (limit {args.limit:g}, goal {GOAL:g})")
    for name, n in sorted(per.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {n:4d}  {name}")
    if rate > args.limit:
        print(f"count_any: {rate:.1f} Any per 1,000 lines is above the limit {args.limit:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
