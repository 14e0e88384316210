"""Whether a rank fits in memory to be analysed, asked before reading it (docs/store.md,
"One rank of any size").

The analyses work on a rank in memory. Rather than be killed by the kernel part way
(no message at all under a memory cgroup), ``polyprof summary`` compares what a rank
will need, estimated from its size, with the memory this process may use (the memory
cgroup's limit, v2 or v1, less what it already uses; else the system's available
memory), and says so in one line when it will not fit. The estimates (measured on
replicates of the V100 trace, docs/benchmarks.md, issue 34): a Kineto / Chrome JSON
file needs about twice its JSON text, a store's rank about 400 bytes per event, each
plus the interpreter's ~150 MiB. ``POLYPROF_MEMORY_CHECK=0`` skips the check.
"""

from __future__ import annotations

import os
from typing import BinaryIO
from pathlib import Path

from ..errors import PolyprofError

#: what the interpreter, NumPy, pyarrow and the analyses' code take before any trace
BASE_BYTES = 150 << 20
#: memory per byte of Kineto / Chrome JSON read whole and analysed
JSON_FACTOR = 2.0
#: memory per event of a store's rank read back and analysed
STORE_EVENT_BYTES = 400
_UNLIMITED = 1 << 60
#: the memory a summary of a store's rank keeps to (``POLYPROF_MEMORY_BOUND``, in MiB):
#: above it, the rank is summarised window by window (ranks/stepwise.py)
MEMORY_BOUND = 512 << 20


def memory_bound() -> int:
    """The bound in bytes: ``POLYPROF_MEMORY_BOUND`` (MiB) if set, else :data:`MEMORY_BOUND`."""
    text = os.environ.get("POLYPROF_MEMORY_BOUND", "").strip()
    if not text:
        return MEMORY_BOUND
    try:
        mib = float(text)
    except ValueError:
        raise PolyprofError(f"POLYPROF_MEMORY_BOUND={text!r}: expected MiB, a number") from None
    if mib <= 0:
        raise PolyprofError(f"POLYPROF_MEMORY_BOUND={text!r}: must be more than 0")
    return int(mib * (1 << 20))


def store_rank_bytes(events: int) -> int:
    """What a store's rank of ``events`` events needs to be read back whole and analysed."""
    return BASE_BYTES + STORE_EVENT_BYTES * events


#: memory per event of a window of a store's rank read and analysed (ranks/stepwise.py):
#: more than a whole rank's per event, for the window's own reading (its row groups
#: filtered, then put in input order) and the C heap left between windows
WINDOW_EVENT_BYTES = 1000


def window_bytes(events: int) -> int:
    """What a window of ``events`` events needs, read and analysed."""
    return BASE_BYTES + WINDOW_EVENT_BYTES * events


def window_events(bound: int) -> int:
    """Events per window that keep a window's analysis within ``bound`` bytes."""
    return max((bound - BASE_BYTES) // WINDOW_EVENT_BYTES, 1 << 14)


def available_bytes() -> int:
    """The memory this process may still use: its memory cgroup's limit less its usage
    (cgroup v2, else v1), capped by the system's MemAvailable."""
    avail = _meminfo_available()
    for limit, usage in _cgroup_files():
        try:
            lim = Path(limit).read_text().strip()
            used = int(Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue
        if lim.isdigit() and int(lim) < _UNLIMITED:
            avail = min(avail, max(int(lim) - used, 0))
    return avail


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return _UNLIMITED


def _cgroup_files() -> list[tuple[str, str]]:
    """(limit file, usage file) of this process's memory cgroup."""
    out: list[tuple[str, str]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # v2
            d = Path("/sys/fs/cgroup") / rel
            out.append((str(d / "memory.max"), str(d / "memory.current")))
        elif "memory" in controllers.split(","):
            d = Path("/sys/fs/cgroup/memory") / rel
            out.append((str(d / "memory.limit_in_bytes"), str(d / "memory.usage_in_bytes")))
    return out


def json_text_bytes(path: Path) -> int:
    """The size of a JSON file's text: a gzip file's from its trailer (the size modulo
    4 GiB, so taken as at least ten times the compressed size when that could wrap), an
    xz file's from its streams' indexes (:func:`_xz_size`)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(6)
        if head == b"\xfd7zXZ\x00":
            return _xz_size(f, size)
        if head[:2] != b"\x1f\x8b" or size < 18:
            return size
        f.seek(-4, os.SEEK_END)
        isize = int.from_bytes(f.read(4), "little")
    return max(isize, 10 * size) if 40 * size >= 1 << 32 else isize


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(buf) and shift < 63:
        byte = buf[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    raise ValueError("a bad varint")


def _xz_size(f: BinaryIO, size: int, most_streams: int = 1024) -> int:
    """The uncompressed size of an xz file: the sum of its streams' blocks' sizes, read
    from each stream's index, last stream first (the footer says where its index is; the
    blocks' compressed sizes where the stream began). Ten times the file's size where the
    file is not as the format says (a damaged file fails when it is read)."""
    total, end = 0, size
    try:
        for _ in range(most_streams):
            while end >= 12:  # stream padding: zeros in fours
                f.seek(end - 4)
                if f.read(4) != b"\0\0\0\0":
                    break
                end -= 4
            if end < 12:
                break
            f.seek(end - 12)
            footer = f.read(12)
            if footer[10:] != b"YZ":
                raise ValueError("no xz stream footer")
            index_size = (int.from_bytes(footer[4:8], "little") + 1) * 4
            start = end - 12 - index_size
            if start < 12:
                raise ValueError("an xz index before the stream")
            f.seek(start)
            index = f.read(index_size)
            n, at = _varint(index, 1)
            blocks = 0
            for _ in range(n):
                unpadded, at = _varint(index, at)
                raw, at = _varint(index, at)
                total += raw
                blocks += (unpadded + 3) // 4 * 4
            end = start - blocks - 12  # the stream header's start
            if end <= 0:
                break
    except (OSError, ValueError, IndexError):
        return 10 * size
    return total


def check_fits(what: str, need: int, hint: str) -> None:
    """Raise one line when ``need`` bytes exceed what this process may use."""
    if os.environ.get("POLYPROF_MEMORY_CHECK", "1") == "0":
        return
    avail = available_bytes()
    if need > avail:
        raise PolyprofError(f"{what}: needs about {_gib(need)} of memory to analyse, {_gib(avail)} is available "
                            f"here; {hint} (POLYPROF_MEMORY_CHECK=0 tries anyway)")


def check_file(path: str | Path) -> None:
    """A Kineto / Chrome JSON file to be read whole and analysed."""
    p = Path(path)
    need = BASE_BYTES + int(JSON_FACTOR * json_text_bytes(p))
    check_fits(str(p), need, f"convert it to a store first (polyprof convert {p} -o STORE streams it in chunks); "
                             "polyprof summary STORE then summarises it window by window within the memory bound, "
                             "and polyprof sql STORE queries it with a memory limit")


def check_store_rank(store: str | Path, rank: int, events: int) -> None:
    """A store's rank of ``events`` events to be read back whole and analysed (a rank
    summarised window by window, ranks/stepwise.py, keeps to the memory bound instead)."""
    need = store_rank_bytes(events)
    check_fits(f"{store}: rank {rank} ({events:,} events)", need,
               "query it with polyprof sql STORE, which is memory-limited, or analyse it on a machine with more memory")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
