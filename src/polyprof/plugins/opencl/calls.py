"""The recorded OpenCL calls as columns, for collect.

The wrappers (intercept.py) append flat records of ``STRIDE`` fields to one list per
thread; here each field becomes one column by slicing those lists (no tuple per
call), and what needs pyopencl (queues, kernels, profiling timestamps) is asked once
per distinct object, or once per command for the timestamps.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, SupportsInt, cast

import numpy as np

from . import intercept as ic
from . import profinfo

if TYPE_CHECKING:
    from pyopencl import CommandQueue, Event
    from pyopencl import profiling_info as ProfilingInfo


@dataclass
class Calls:
    """Every recorded call, one row each, threads one after another."""

    threads: list[tuple[int, str]]  # (native tid, name) per thread index
    thread: np.ndarray  # thread index per row
    api: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    corr: np.ndarray
    events: list[object]  # the command's pyopencl Event, or None
    queues: list[object]  # the command's CommandQueue, or None
    info: list[object]  # the kernel, a byte count, or the waited events' handles
    global_size: list[object]  # an int or a tuple of ints, or None
    local_size: list[object]
    blocking: np.ndarray
    waits: list[object]  # the handles of the enqueue's event wait list, or None

    @property
    def n(self) -> int:
        return len(self.api)


def flatten(rec: ic.Recording) -> Calls:
    """The recording's per-thread flat lists -> columns."""
    S = ic.STRIDE
    lists = [(tid, name, flat[:len(flat) // S * S]) for tid, name, flat in rec.threads]
    flat = lists[0][2] if len(lists) == 1 else list(itertools.chain.from_iterable(f for _t, _n, f in lists))
    n = len(flat) // S
    counts = [len(f) // S for _t, _n, f in lists]
    return Calls(
        threads=[(tid, name) for tid, name, _f in lists],
        thread=np.repeat(np.arange(len(lists), dtype=np.int64), counts),
        api=np.fromiter(flat[0::S], np.int32, n), t0=np.fromiter(flat[1::S], np.int64, n),
        t1=np.fromiter(flat[2::S], np.int64, n), corr=np.fromiter(flat[3::S], np.int64, n),
        events=flat[4::S], queues=flat[5::S], info=flat[6::S], global_size=flat[7::S],
        local_size=flat[8::S], blocking=np.array(flat[9::S], dtype=bool).reshape(n), waits=flat[10::S])


def _ptr(obj: object) -> int:
    try:
        p = getattr(obj, "int_ptr", None)
    except Exception:  # a released object's handle
        return -1
    return int(p) if isinstance(p, int) else -1


def by_object(objs: list[object], value: Callable[[object], object]) -> np.ndarray:
    """``value(obj)`` per row, asked once per distinct object (by identity); None -> None.
    Row order kept; an object array."""
    n = len(objs)
    if not n:
        return np.zeros(0, object)
    ids = np.fromiter(map(id, objs), np.int64, n)
    uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    vals = np.empty(len(uniq), object)
    for k, i in enumerate(first.tolist()):
        o = objs[i]
        vals[k] = None if o is None else value(o)
    return vals[inv.reshape(-1)]


def queue_table(rec: ic.Recording) -> dict[int, ic.QueueRef]:
    """Every queue a recorded call used, read once (``id(queue)`` -> QueueRef): the ones
    the program closed as it closed them, the others now. Run at stop; from then on no
    queue object is touched but through its QueueRef (and open ones to flush them)."""
    S = ic.STRIDE
    out: dict[int, ic.QueueRef] = {}
    for _tid, _name, flat in rec.threads:
        for q in flat[5::S]:
            if q is None or id(q) in out:
                continue
            ref = rec.finished.get(id(q)) or ic.read_queue(q)
            if ref is not None:
                out[id(q)] = ref
    return out


def queue_keys(c: Calls, table: dict[int, ic.QueueRef]) -> tuple[np.ndarray, dict[int, ic.QueueRef]]:
    """int_ptr of each row's queue (-1: none), and one QueueRef per int_ptr."""
    def ptr(q: object) -> int:
        r = table.get(id(q))
        return -1 if r is None else r.int_ptr

    ptrs = by_object(c.queues, ptr)
    qkey = np.array([-1 if p is None else p for p in ptrs.tolist()], np.int64).reshape(c.n)
    queues: dict[int, ic.QueueRef] = {}
    for r in table.values():
        queues.setdefault(r.int_ptr, r)
    return qkey, queues


def open_queues(table: dict[int, ic.QueueRef]) -> dict[int, CommandQueue]:
    """One queue object per int_ptr, of the queues the program has not closed."""
    out: dict[int, CommandQueue] = {}
    for r in table.values():
        if not r.closed:
            out.setdefault(r.int_ptr, cast("CommandQueue", r.queue))  # a queue: pyopencl took it as one
    return out


@dataclass
class DeviceTimes:
    ts: np.ndarray  # (n, 4): queued, submit, start, end; -1 where unknown
    has_event: np.ndarray
    incomplete: np.ndarray
    unprofiled: int
    ptr_to_row: dict[int, int]

    @property
    def timed(self) -> np.ndarray:
        return self.has_event & (self.ts[:, 3] > 0) & ~self.incomplete


def device_times(c: Calls, profiling_info: type[ProfilingInfo], pending: set[int]) -> DeviceTimes:
    """Each command's four profiling timestamps (the commands in ``pending`` did not
    complete: no timestamps, marked incomplete); read through ``profinfo.py``."""
    n = c.n
    ts = np.full((n, 4), -1, np.int64)
    has_event = np.fromiter((e is not None for e in c.events), bool, n)
    incomplete = np.zeros(n, bool)
    unprofiled = 0
    ptr_to_row: dict[int, int] = {}
    events = c.events
    rows: list[int] = []
    for i in np.flatnonzero(has_event).tolist():
        ptr = _ptr(events[i])
        if ptr < 0:
            unprofiled += 1
            continue
        ptr_to_row[ptr] = i
        if ptr in pending:
            incomplete[i] = True
        else:
            rows.append(i)
    if rows:
        # Events by construction: what the wrapped enqueue returned
        got, ok = profinfo.timestamps([cast("Event", events[i]) for i in rows], profiling_info)
        ts[rows] = got
        unprofiled += int((~ok).sum())
    return DeviceTimes(ts, has_event, incomplete, unprofiled, ptr_to_row)


def kernel_name(k: object) -> str:
    try:
        return str(getattr(k, "function_name", "kernel"))
    except Exception:  # a released kernel
        return "kernel"


def device_names(c: Calls, rows: np.ndarray) -> np.ndarray:
    """The device activity's name of each of ``rows``: the kernel's function name, else
    the command's (WriteBuffer (HtoD)...)."""
    api = c.api[rows]
    names = np.array([ic.API[a][1] for a in range(len(ic.API))], object)[api]
    kr = np.flatnonzero(api == ic.KERNEL)
    if len(kr):
        names[kr] = by_object([c.info[i] for i in rows[kr].tolist()], kernel_name)
    return names


def _sizes_text(v: object) -> str | None:
    """A work size as "x,y,z" (the grid/block stat format)."""
    if isinstance(v, int):
        return str(v)
    if not isinstance(v, Iterable):
        return None
    parts = []
    for x in v:
        if not isinstance(x, SupportsInt):
            return None
        parts.append(str(int(x)))
    return ",".join(parts)


_sizes_cached = functools.lru_cache(maxsize=4096)(_sizes_text)


def size_text(v: object) -> str | None:
    if v is None:
        return None
    try:
        return _sizes_cached(v)
    except TypeError:  # unhashable (a list)
        return _sizes_text(v)


def kernel_sizes(c: Calls, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the kernel launches among ``rows``: their positions in ``rows``, grid and block
    texts (None where not given)."""
    k = np.flatnonzero(c.api[rows] == ic.KERNEL)
    r = rows[k].tolist()
    grid = np.array([size_text(c.global_size[i]) for i in r], object).reshape(len(r))
    block = np.array([size_text(c.local_size[i]) for i in r], object).reshape(len(r))
    return k, grid, block


def byte_counts(c: Calls, rows: np.ndarray) -> np.ndarray:
    """Bytes moved by each of ``rows`` (-1 where the record holds no byte count)."""
    info = c.info
    not_kernel = (c.api[rows] != ic.KERNEL).tolist()
    return np.fromiter((info[i] if nk and isinstance(info[i], int) and info[i] >= 0 else -1
                        for i, nk in zip(rows.tolist(), not_kernel)), np.int64, len(rows))


def wait_lists(c: Calls, ptr_to_row: dict[int, int], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of ``rows``, those enqueued with an event wait list of recorded commands: their
    positions in ``rows`` and the correlation ids of those commands as text ("3,7", the
    ``wait_list`` stat); one pass over the rows that have a list (a program's few)."""
    waits = c.waits
    pos: list[int] = []
    texts: list[str] = []
    for k, i in enumerate(rows.tolist()):
        w = waits[i]
        if not w:
            continue
        ids = [int(c.corr[j]) for j in (ptr_to_row.get(p) for p in w) if j is not None]  # type: ignore[union-attr]
        if ids:
            pos.append(k)
            texts.append(",".join(map(str, ids)))
    return np.asarray(pos, np.int64), np.asarray(texts, object)
