"""Launch configuration of kernels and their theoretical occupancy.

A kernel's grid, block, registers per thread and shared memory per block come from its
stats (Kineto's ``grid``, ``block``, ``registers per thread``, ``shared memory``; the
CUPTI plugin, nsys and rocprof readers write the same keys). Theoretical occupancy is
the warps resident per SM over the SM's maximum, with resident blocks the fewest that
each limit allows (CUDA's occupancy calculator; docs/analysis.md, "Occupancy"):

- threads: ``maxThreadsPerMultiprocessor // (warps per block × warpSize)``
- registers: ``regsPerMultiprocessor // (warps per block × ceil(regs × warpSize / 256) × 256)``
- shared memory: ``sharedMemPerMultiprocessor // ceil((smem + reserved) / 128) × 128``,
  reserved 1 KiB per block from compute capability 8.0 on
- blocks: the architecture's most resident blocks per SM (``MAX_BLOCKS``).

The device's limits are those of its ``deviceProperties`` (Kineto writes them; on the
device plane's properties). Without them (AMD, a trace without properties) occupancy is
NaN.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np

from ..trace import keys
from ..trace.core import Trace
from ..trace.factorize import factorize

REGISTERS, SHARED_MEMORY = keys.REGISTERS, keys.SHARED_MEMORY
#: most resident blocks per SM by compute capability (CUDA programming guide, table of
#: technical specifications per compute capability)
MAX_BLOCKS = {(5, 0): 32, (5, 2): 32, (5, 3): 32, (6, 0): 32, (6, 1): 32, (6, 2): 32, (7, 0): 32, (7, 2): 32,
              (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24, (9, 0): 32, (10, 0): 32, (12, 0): 32}
REG_UNIT = 256  # registers are allocated per warp in units of 256
SMEM_UNIT = 128  # shared memory is allocated per block in units of 128 bytes
LIMITS = ("threads", "registers", "shared_mem", "blocks")
#: the columns :func:`launch_config` adds to the kernel table
LAUNCH_COLUMNS = ("grid", "block", "registers", "shared_mem", "occupancy", "occupancy_limit")


def dims_text(v: Any) -> str:
    """A grid or block as ``"x,y,z"`` ("" when unknown): from a list, ``"[1, 2, 3]"`` or ``"1,2,3"``."""
    if isinstance(v, str):
        s = v.strip()
        try:
            v = json.loads(s) if s.startswith("[") else [int(x) for x in s.replace(" ", ",").split(",") if x]
        except ValueError:
            return ""
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
        return ",".join(str(int(x)) for x in v)
    return ""


def occupancy(threads_per_block: int, registers: int, shared_mem: int,
              props: Mapping[str, Any]) -> tuple[float, str, int]:
    """(theoretical occupancy 0..1, the limit that binds, resident blocks per SM) of one
    launch on a device with ``props`` (Kineto's deviceProperties names); NaN, "", 0
    where a limit is unknown."""
    try:  # the properties come from the file: any of them may be missing, text, infinite, 0
        warp = int(props.get("warpSize", 32))
        max_threads = int(props["maxThreadsPerMultiprocessor"])
        regs_sm = int(props["regsPerMultiprocessor"])
        smem_sm = int(props["sharedMemPerMultiprocessor"])
        cc = (int(props["computeMajor"]), int(props["computeMinor"]))
        max_block = int(props.get("maxThreadsPerBlock", 1024))
    except (KeyError, TypeError, ValueError, OverflowError):
        return math.nan, "", 0
    if warp <= 0 or max_threads < warp or threads_per_block <= 0 or threads_per_block > max_block:
        return math.nan, "", 0
    warps = -(-threads_per_block // warp)
    by = {
        "threads": max_threads // (warps * warp),
        "registers": regs_sm // (warps * (-(-registers * warp // REG_UNIT)) * REG_UNIT) if registers > 0 else 10 ** 9,
        "shared_mem": (smem_sm // (-(-(shared_mem + (1024 if cc >= (8, 0) else 0)) // SMEM_UNIT) * SMEM_UNIT)
                       if shared_mem > 0 else 10 ** 9),
        "blocks": MAX_BLOCKS.get(cc, 32),
    }
    limit = min(LIMITS, key=lambda k: by[k])  # ties: the first of LIMITS
    blocks = by[limit]
    return blocks * warps / (max_threads // warp), limit, blocks


def launch_config(trace: Trace, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Columns for kernel events ``rows``: ``grid`` and ``block`` ("x,y,z"),
    ``registers`` (per thread), ``shared_mem`` (bytes per block), ``occupancy``
    (theoretical, 0..1) and ``occupancy_limit`` (threads / registers / shared_mem /
    blocks: what binds). Computed once per distinct launch configuration and device."""
    n = len(rows)
    found = trace.stats.lookup_rows([keys.GRID, keys.BLOCK, REGISTERS, SHARED_MEMORY], rows) if n else {}
    texts = {}
    for k in (keys.GRID, keys.BLOCK):
        out = np.full(n, "", object)
        if k in found:
            has, vals = found[k]
            out[has] = vals
        texts[k] = out
    nums = {}
    for k in (REGISTERS, SHARED_MEMORY):
        out = np.full(n, -1, np.int64)
        if k in found:
            has, vals = found[k]
            v = np.asarray(vals)
            out[has] = v.astype(np.int64) if v.dtype.kind in "iuf" else [int(x) if str(x).isdigit() else -1
                                                                         for x in v.tolist()]
        nums[k] = out
    plane = trace.track_plane[trace.events["track"][rows]].astype(np.int64) if n else np.zeros(0, np.int64)
    gc, gu = factorize(texts[keys.GRID])
    bc, bu = factorize(texts[keys.BLOCK])
    grid_txt = np.array([dims_text(x) for x in gu], object)[gc] if n else np.zeros(0, object)
    block_u = [dims_text(x) for x in bu]
    block_txt = np.array(block_u, object)[bc] if n else np.zeros(0, object)
    threads_u = np.array([int(np.prod([int(x) for x in b.split(",")])) if b else 0 for b in block_u], np.int64)
    key = np.stack([bc.astype(np.int64), nums[REGISTERS], nums[SHARED_MEMORY], plane], 1) if n else np.zeros((0, 4))
    uniq, inv = np.unique(key, axis=0, return_inverse=True) if n else (np.zeros((0, 4), np.int64), np.zeros(0, int))
    occ = np.full(len(uniq), np.nan)
    lim = np.full(len(uniq), "", object)
    for i, (b, r, s, p) in enumerate(uniq.tolist()):
        props = trace.planes[int(p)].properties or {}
        if r >= 0 and s >= 0:
            occ[i], lim[i], _ = occupancy(int(threads_u[b]), int(r), int(s), props)
    inv = np.asarray(inv).reshape(-1)
    return {"grid": grid_txt, "block": block_txt, "registers": nums[REGISTERS], "shared_mem": nums[SHARED_MEMORY],
            "occupancy": occ[inv] if n else np.zeros(0), "occupancy_limit": lim[inv] if n else np.zeros(0, object)}
