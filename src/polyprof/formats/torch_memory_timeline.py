"""torch's memory timeline files (``profiler.export_memory_timeline``) as memory counters.

torch writes, for one device, either

- the plot points (``.json`` / ``.json.gz``): ``[times, sizes]``, times in microseconds,
  ``sizes[i]`` the bytes held just after ``times[i]`` in each category, after a leading
  unused slot: parameter, optimizer state, input, temporary, activation, gradient,
  autograd detail, unknown (``torch.profiler._memory_profiler.Category``, in that order);
- or the raw events (``.raw.json.gz``): ``[[time_ns, action, bytes, category], ...]``,
  action 1-4 (pre-existing, create, increment version, destroy), bytes negative when
  memory is given back; pre-existing memory has time -1.

Either becomes one counter per category, ``memory.<category>_bytes``, and their sum,
``memory.allocated_bytes`` (the name the memory analyses and writers give a device's
allocated bytes), on one plane named after ``device`` (the file does not say which
device it describes; ``torch.profiler`` defaults to ``cuda:0`` where there is one, else
``cpu``). Times stay as torch wrote them (its wall clock, microseconds in the plot
points). The raw events are not made allocation events: they carry no address, so
a free cannot be paired with its allocation, which the memory tables need.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..errors import TraceFormatError
from ..trace import keys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from .safety import TIME_LIMIT_NS, Inflation, guarded

#: torch.profiler._memory_profiler's categories, in the order of its files' columns
CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail",
              "unknown")
_NUM = rb"-?\d[\d.eE+-]*"
#: the raw events: ``[[time_ns, action, bytes, category], ...]``, four numbers each
_RAW_HEAD = re.compile(rb"^\s*\[\s*\[\s*(" + _NUM + rb"\s*,\s*){3}(" + _NUM + rb"|null)\s*\]")
#: the plot points: ``[times, sizes]``, times a list of numbers, sizes a list of lists
#: (after the times; a head that ends within the times, a long run's, is taken too)
_PLOT_HEAD = re.compile(rb"^\s*\[\s*\[\s*(" + _NUM + rb"\s*,\s*)*(" + _NUM + rb"\s*)?(\]\s*,\s*\[\s*(\[|\])|$)")
_MAX_BYTES = 4 << 30  # the files are small: JSON of one number per point
_SIZE_LIMIT = 2**46  # bytes of one category or event (64 TiB): beyond is damage, and sums of them fit int64


def sniff(head: bytes, path: Path) -> bool:
    """A JSON array shaped as one of torch's two files: arrays of four numbers (the raw
    events), or an array of numbers then an array of arrays (the plot points). Chrome JSON
    arrays hold objects; a program's own pairs (``[[4, 40152792], [6, ...]]``, in a job's
    directory) are neither: before, they were taken for a timeline, and the job failed on
    that "rank"."""
    body = head[2:] if head.startswith(b"GZ") else head
    return bool(_RAW_HEAD.match(body) or _PLOT_HEAD.match(body))


def _plane_name(device: str) -> str:
    dev = device.strip().lower()
    if dev in ("cpu", ""):
        return keys.HOST_PLANE
    kind, _, index = dev.partition(":")
    kind = {"cuda": "GPU", "hip": "GPU", "xpu": "XPU", "mtia": "MTIA", "mps": "MPS"}.get(kind, kind.upper())
    return f"/device:{kind}:{int(index) if index.isdigit() else 0}"


@guarded
def load(path: str | Path, device: str = "") -> Trace:
    """Read a memory timeline file; ``device`` names the device it describes (e.g.
    ``cuda:0``; the plane is ``/host:CPU`` for ``cpu`` or when not given)."""
    path = Path(path)
    try:
        doc = orjson.loads(_read(path))
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"broken JSON ({e})") from None
    b = TraceBuilder({"title": f"torch memory timeline {path.name}"})
    name = _plane_name(device)
    plane = b.plane(name, "host" if name == keys.HOST_PLANE else "device")
    if _is_plot(doc):
        times = _bounded(path, doc[0], TIME_LIMIT_NS // 1000, "a time") * 1000
        sizes = _bounded(path, doc[1], _SIZE_LIMIT, "a size").reshape(len(doc[1]), len(CATEGORIES) + 1)[:, 1:]
        _counters(b, plane, times, sizes)
        return b.build()
    raw = _raw(path, doc)
    t, _, nbytes, cat = raw.T
    start = t[t >= 0].min() if (t >= 0).any() else 0
    t = np.where(t < 0, start, t)
    order = np.argsort(t, kind="stable")
    t, nbytes, cat = t[order], nbytes[order], cat[order]
    delta = np.zeros((len(t), len(CATEGORIES)), np.int64)
    delta[np.arange(len(t)), cat] = nbytes
    levels = np.cumsum(delta, axis=0)
    last = np.ones(len(t), bool)  # one point per time: the levels after its last event
    last[:-1] = t[1:] != t[:-1]
    _counters(b, plane, t[last], levels[last])
    return b.build()


def _read(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    infl = Inflation(path, len(raw))
    try:
        out = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise TraceFormatError(path, f"corrupt gzip data ({e})") from None
    infl.add(len(out))
    if len(out) > _MAX_BYTES:
        raise TraceFormatError(path, "a memory timeline of more than 4 GiB")
    return out


def _is_plot(doc: Any) -> bool:
    return (isinstance(doc, list) and len(doc) == 2 and isinstance(doc[0], list) and isinstance(doc[1], list)
            and len(doc[0]) == len(doc[1]) and (not doc[1] or isinstance(doc[1][0], list))
            and _numbers(doc[0], 1) and _rows(doc[1], len(CATEGORIES) + 1))


def _numbers(a: list, dims: int) -> bool:
    try:
        arr = np.asarray(a)
    except (ValueError, OverflowError):
        return False
    return arr.ndim == dims and (not arr.size or arr.dtype.kind in "iu")


def _rows(a: list, width: int) -> bool:
    return not a or (_numbers(a, 2) and np.asarray(a).shape[1] == width)


def _raw(path: Path, doc: Any) -> np.ndarray:
    if not isinstance(doc, list) or not doc or not _rows(doc, 4):
        raise TraceFormatError(path, "not a torch memory timeline: expected [times, sizes by category] "
                                     "(export_memory_timeline .json) or [[time, action, bytes, category], ...] "
                                     "(.raw.json.gz)")
    raw = _bounded(path, doc, TIME_LIMIT_NS, "a number")
    _bounded(path, raw[:, 2], _SIZE_LIMIT, "a size")
    bad = (raw[:, 1] < 1) | (raw[:, 1] > 4) | (raw[:, 3] < 0) | (raw[:, 3] >= len(CATEGORIES))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceFormatError(path, f"not a torch memory timeline: event {i} {raw[i].tolist()} has an action "
                                     f"outside 1-4 or a category outside 0-{len(CATEGORIES) - 1}")
    return raw


def _bounded(path: Path, values: Any, limit: int, what: str) -> np.ndarray:
    """``values`` (integers, checked by _numbers) as int64, refused where one is beyond +-``limit``."""
    arr = np.asarray(values)
    far = (arr < -limit) | (arr > limit)
    if far.any():
        raise TraceFormatError(path, f"not a torch memory timeline: {what} of {arr[far].flat[0]} is beyond "
                                     f"+-{limit} (damaged)")
    return arr.astype(np.int64)


def _counters(b: TraceBuilder, plane: int, times: np.ndarray, sizes: np.ndarray) -> None:
    for i, cat in enumerate(CATEGORIES):
        if sizes[:, i].any():
            b.counter(plane, f"memory.{cat}_bytes", times, sizes[:, i])
    b.counter(plane, keys.COUNTER_ALLOCATED, times, sizes.sum(axis=1))
