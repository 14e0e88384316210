"""Ranks of one job made from a real Kineto trace, with known truth: each rank's host
clock off by a chosen offset, and chosen ranks arriving late at every collective.

Kineto JSON times are microseconds (fractions kept for ns); a rank's whole file moves
by its clock offset (the truth the alignment must recover, with the opposite sign). A
late rank's collective kernels start later by ``late_us`` and end when they did (the
others wait for it, then all finish together). Written with the stdlib only, so the
test's truth does not depend on polyprof's reader.
"""

from __future__ import annotations

import bisect
import gzip
import json
from decimal import Decimal
from pathlib import Path


def _is_collective_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel" and e.get("name", "").lower().startswith(("nccl", "rccl"))


def make_ranks(src: Path, out_dir: Path, offsets_ns: list[int], late_us: dict[int, float] | None = None,
               jitter_us: float = 0.0, broadcast_roots: bool = True) -> list[Path]:
    """Write ``rank-<r>.json.gz`` for each offset; returns the paths. ``offsets_ns[r]``
    is added to rank r's clock (so the alignment must add ``-offsets_ns[r]``).

    ``broadcast_roots``: each broadcast kernel names its root as PyTorch 2.4+ does (the
    comms args' ``Rank``, a rank of ``Process Group Ranks``), the k-th broadcast rooted
    at rank k mod the world size. The A100 trace names none (its PyTorch wrote no
    ``Rank``), and a broadcast whose root is unknown bounds no clock (its root may end
    before a receiver begins: ranks/align.py), which leaves only the all-reduces, the
    shortest 1.7 ms long. The copies' broadcasts run at the same times on every rank, so
    any root is consistent with them; rooted at each rank in turn, they bound every
    rank's clock from both sides, as a job's broadcasts from several roots do."""
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
        if broadcast_roots:
            _name_roots(d["traceEvents"], world)
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


def _name_roots(events: list[dict], world: int) -> None:
    """The k-th broadcast kernel (in time order) rooted at rank k mod ``world``: its
    comms args' ``Rank`` and ``Process Group Ranks`` (see :func:`make_ranks`)."""
    found = sorted((e for e in events if _is_collective_kernel(e) and "broadcast" in e["name"].lower()),
                   key=lambda e: Decimal(str(e["ts"])))
    for k, e in enumerate(found):
        e["args"] = {**e.get("args", {}), "Rank": k % world, "Process Group Ranks": str(list(range(world)))}


def slow_kernel(src: Path, dst: Path, rank: int, world: int, correlation: int, extra_us: float) -> Path:
    """Write ``src`` as ``rank`` of ``world`` with the device activity of ``correlation``
    taking ``extra_us`` longer, the delay passed on as a device would: each later activity
    on the device starts no earlier than the new end of the one before it on its stream
    (where it followed that one's end), and a collective kernel (``nccl*``) no earlier than
    the new ends of the other streams' activities that had ended before it started (the
    collective's stream waits for the compute stream); idle time absorbs the delay. Host
    events stay: the host calls of the A100 NCCL trace never wait on the device long
    enough to move (its longest waiting call is a few microseconds)."""
    doc = json.load(gzip.open(src))
    info = dict(doc.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world)
    doc["distributedInfo"] = info
    dev = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X"
                  and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: Decimal(str(e["ts"])))
    ends: dict[object, tuple[list[Decimal], list[Decimal]]] = {}  # per stream: old ends, new ends
    for e in dev:
        stream = e["args"].get("stream")
        ts, dur = Decimal(str(e["ts"])), Decimal(str(e.get("dur", 0)))
        new = ts
        for s, (old, moved) in ends.items():
            if s == stream or _is_collective_kernel(e):
                i = bisect.bisect_right(old, ts)  # the last on that stream that had ended by then
                if i:
                    new = max(new, moved[i - 1])
        mine = ends.setdefault(stream, ([], []))
        mine[0].append(ts + dur)
        if e["args"].get("correlation") == correlation:
            dur += Decimal(str(extra_us))
            e["dur"] = float(dur)
        mine[1].append(new + dur)
        e["ts"] = float(new)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return dst
