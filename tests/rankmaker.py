"""Ranks of one job made from a real Kineto trace, with known truth: each rank's host
clock off by a chosen offset, and chosen ranks arriving late at every collective.

Kineto JSON times are microseconds (fractions kept for ns); a rank's whole file moves
by its clock offset (the truth the alignment must recover, with the opposite sign). A
late rank's collective kernels start later by ``late_us`` and end when they did (the
others wait for it, then all finish together). Written with the stdlib only, so the
test's truth does not depend on polyprof's reader.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path


def _is_collective_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel" and e.get("name", "").lower().startswith(("nccl", "rccl"))


def make_ranks(src: Path, out_dir: Path, offsets_ns: list[int], late_us: dict[int, float] | None = None,
               jitter_us: float = 0.0) -> list[Path]:
    """Write ``rank-<r>.json.gz`` for each offset; returns the paths. ``offsets_ns[r]``
    is added to rank r's clock (so the alignment must add ``-offsets_ns[r]``)."""
    late_us = late_us or {}
    doc = json.load(gzip.open(src))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    world = len(offsets_ns)
    for r, off in enumerate(offsets_ns):
        d = json.loads(json.dumps(doc))
        info = dict(d.get("distributedInfo") or {})
        info.update(rank=r, world_size=world)
        d["distributedInfo"] = info
        shift = Decimal(off) / 1000
        k = 0
        for e in d["traceEvents"]:
            if "ts" not in e:
                continue
            ts = Decimal(str(e["ts"])) + shift
            if _is_collective_kernel(e) and (late_us.get(r) or jitter_us):
                delay = Decimal(str(late_us.get(r, 0.0))) + Decimal(str(jitter_us * ((k * 7 + r * 3) % 5) / 4))
                k += 1
                dur = Decimal(str(e.get("dur", 0)))
                delay = min(delay, dur * Decimal("0.9"))
                ts += delay
                e["dur"] = float(dur - delay)
            e["ts"] = float(ts) if ts != int(ts) else int(ts)
        p = out_dir / f"rank-{r}.json.gz"
        with gzip.open(p, "wt") as f:
            json.dump(d, f)
        paths.append(p)
    return paths
