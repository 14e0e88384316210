"""Whether a rank fits in memory to be analysed, asked before reading it (docs/store.md,
"One rank of any size"; docs/reliability.md, "Memory").

The analyses work on a rank in memory. Rather than be killed by the kernel part way
(no message at all under a memory cgroup), every command that reads a whole trace
(``summary``, ``report``, ``export``, ``diff``) compares what it will need, estimated per
command from the trace's size, with the memory this process may use (the memory
cgroup's limit, v2 or v1, less its usage but counting its inactive page cache as free;
else the system's MemAvailable), and says so in one line when it will not fit. The
estimates are measured peaks (docs/reliability.md): a Kineto / Chrome JSON file needs
:data:`BASE_BYTES` plus :data:`JSON_FACTORS` of its text per command (``summary --json``
and ``report`` keep per-launch tables and write them out whole: more than twice the
text), a store's rank :data:`STORE_FACTORS` bytes per event. ``POLYPROF_MEMORY_CHECK=0``
skips the check; ``POLYPROF_MEMORY_AVAILABLE`` (MiB) stands for the memory available.
"""

from __future__ import annotations

import lzma
import os
import re
import stat as stat_mod
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

from .. import envvars
from ..errors import PolyprofError

#: what the interpreter, NumPy, pyarrow and the analyses' code take before any trace
BASE_BYTES = 150 << 20
#: ``export``'s memory per byte of Kineto / Chrome JSON by the format written (the command
#: ``export:FORMAT``): the measured peaks less :data:`BASE_BYTES` over the text grow with
#: the trace (xspace 6.3 at 1M events, 7.2 at 2M): above the largest, by 10% or more
#: (docs/reliability.md, "Memory")
EXPORT_FACTORS = {"chrome": 7.0, "kineto": 7.5, "xspace": 8.0, "tensorboard": 8.0, "perfetto": 1.6,
                  "polyprof": 1.5, "parquet": 2.5}
#: memory per byte of Kineto / Chrome JSON read whole, by command (``summary-json``:
#: ``summary --json``; ``diff``: per byte of all its inputs together; ``export``, its format
#: not known: the largest of :data:`EXPORT_FACTORS`), each the largest of the measured
#: peaks less :data:`BASE_BYTES` over the text, rounded up (docs/reliability.md)
JSON_FACTORS = {"summary": 1.0, "summary-json": 2.5, "report": 2.6, "export": max(EXPORT_FACTORS.values()),
                "diff": 0.25, **{f"export:{fmt}": f for fmt, f in EXPORT_FACTORS.items()}}
#: the ``summary`` text's factor, for callers that name no command
JSON_FACTOR = JSON_FACTORS["summary"]
#: what ``summary`` (text, ``--json``) and ``report`` need per thing a JSON trace holds
#: (:class:`JsonShape`): bytes per event, per event of a launch, per byte of text less
#: whitespace, per distinct name; fitted above the peaks measured on a generated GPU
#: trace, a compact one whose kernels all have names of their own and a real torch CPU
#: trace (docs/reliability.md): events per byte of text differ 4x between them
SHAPE_FACTORS = {"summary": (60, 0, 0.75, 800), "summary-json": (250, 500, 0, 1100), "report": (50, 0, 3.0, 400)}
#: memory per byte of an XSpace (its protobuf, uncompressed) read whole, by the reader's
#: implementation (``formats/xspace/decode.IMPLEMENTATION``): the compiled walk keeps
#: columns; protobuf's Python message objects (no extension, or ``POLYPROF_PURE_PYTHON=1``)
#: take twice as much and more. Measured peaks of ``polyprof summary`` less the ~45 MiB
#: floor over the file: 6.4 and 3.3 compiled, 14.3 and 11.5 in Python (the 11 MB H200 JAX
#: transformer, the H200 torch transformer exported to XSpace, 10.7 MB), with a margin
XSPACE_FACTORS = {"c": 8.0, "python": 18.0}
#: memory per event of a store's rank read back whole, by command (``diff``: per event of
#: all its inputs together); ``summary`` is :data:`STORE_EVENT_BYTES`
STORE_FACTORS = {"summary": 400, "summary-json": 400, "report": 850, "export": 1800, "diff": 300}
#: memory per event of a store's rank read back and analysed
STORE_EVENT_BYTES = 400
_UNLIMITED = 1 << 60
#: the memory a summary of a store's rank keeps to (``POLYPROF_MEMORY_BOUND``, in MiB):
#: above it, the rank is summarised window by window (ranks/stepwise.py)
MEMORY_BOUND = 512 << 20


def memory_bound() -> int:
    """The bound in bytes: ``POLYPROF_MEMORY_BOUND`` (MiB) if set, else :data:`MEMORY_BOUND`."""
    return int(envvars.number("POLYPROF_MEMORY_BOUND", MEMORY_BOUND >> 20, "MiB") * (1 << 20))


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
    """The memory this process may still use: ``POLYPROF_MEMORY_AVAILABLE`` (MiB) where
    set; else its memory cgroup's limit less its usage, the cgroup's inactive page cache
    counted as free (the kernel reclaims it before it kills: cgroup v2, else v1), capped
    by the system's MemAvailable (which counts reclaimable cache as available too) and
    by what ``ulimit -v`` leaves it (:func:`_address_space_left`)."""
    if os.environ.get("POLYPROF_MEMORY_AVAILABLE", "").strip():
        return int(envvars.number("POLYPROF_MEMORY_AVAILABLE", 0, "MiB", zero=True, most=1 << 40) * (1 << 20))
    avail = min(_meminfo_available(), _address_space_left())
    for limit, usage, stat in _cgroup_files():
        try:
            lim = Path(limit).read_text().strip()
            used = int(Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue
        if lim.isdigit() and int(lim) < _UNLIMITED:
            avail = min(avail, max(int(lim) - used + min(_reclaimable(stat), used), 0))
    return avail


def _reclaimable(stat: str) -> int:
    """The page cache a cgroup's ``memory.stat`` says the kernel can drop first: its
    inactive file pages (v2 ``inactive_file``; v1 ``total_inactive_file``, the cgroup
    and its children, else ``inactive_file``); 0 where the file cannot be read."""
    try:
        lines = Path(stat).read_text().splitlines()
    except OSError:
        return 0
    found: dict[str, int] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        if key in ("total_inactive_file", "inactive_file"):
            try:
                found[key] = int(value)
            except ValueError:
                continue
    return found.get("total_inactive_file", found.get("inactive_file", 0))


def _address_space_left() -> int:
    """What the address-space limit (``ulimit -v``, RLIMIT_AS) leaves this process: the
    limit less its address space now (``VmSize``), where a limit is set. Its allocations
    fail there (a MemoryError half way) before memory runs out."""
    import resource  # only here: the limit is read once a command's memory is checked

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft == resource.RLIM_INFINITY or soft < 0:
        return _UNLIMITED
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(soft - (int(line.split()[1]) << 10), 0)
    except (OSError, ValueError, IndexError):
        pass
    return soft


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return _UNLIMITED


def _cgroup_files() -> list[tuple[str, str, str]]:
    """(limit file, usage file, stat file) of this process's memory cgroup."""
    out: list[tuple[str, str, str]] = []
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
            out.append((str(d / "memory.max"), str(d / "memory.current"), str(d / "memory.stat")))
        elif "memory" in controllers.split(","):
            d = Path("/sys/fs/cgroup/memory") / rel
            out.append((str(d / "memory.limit_in_bytes"), str(d / "memory.usage_in_bytes"),
                        str(d / "memory.stat")))
    return out


#: text read from the start of a JSON trace (decompressed) to estimate what the rest holds
SAMPLE_BYTES = 4 << 20
_NAME_RE: re.Pattern[bytes] | None = None


@dataclass(frozen=True)
class JsonShape:
    """What a Kineto / Chrome JSON file holds, estimated from its size and a sample of its
    first :data:`SAMPLE_BYTES` of text (exact where the sample is the whole text)."""

    text: int  #: bytes of text
    events: float  #: events (``"ph"`` keys)
    launched: float  #: events of a launch (``"correlation"`` keys: runtime calls, kernels, copies)
    dense: float  #: bytes of text less whitespace (a pretty-printed file's indentation)
    names: float  #: distinct event names
    how: str = ""  #: how the text's size was had where it is not exact (said in a refusal)


def json_shape(path: Path) -> JsonShape:
    """The text's size (:func:`json_text_bytes`) and, scaled from the sample, its events,
    launches, dense bytes and distinct names: the names seen in the sample, plus as many
    more as the sample's second half met new ones per name (a trace whose kernels all
    have names of their own keeps meeting new ones; one that repeats its ops does not)."""
    text, how, sample = _text_and_sample(path)
    n = max(len(sample), 1)
    scale = max(text, len(sample)) / n
    global _NAME_RE
    if _NAME_RE is None:
        # unrolled (runs of plain bytes, then escapes): an alternation per byte held ~136
        # bytes of re's backtracking state per byte of a name (a 3 MB name: 450 MB)
        _NAME_RE = re.compile(rb'"name"\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"')
    names = _NAME_RE.findall(sample)
    half = len(names) // 2
    seen = set(names[:half])
    new = len(set(names[half:]) - seen)
    distinct = len(seen.union(names[half:]))
    more = new / max(len(names) - half, 1) * len(names) * (scale - 1)
    blank = sum(sample.count(c) for c in (b" ", b"\n", b"\t", b"\r"))
    return JsonShape(text, sample.count(b'"ph"') * scale, sample.count(b'"correlation"') * scale,
                     (len(sample) - blank) * scale, distinct + more, how)


def json_text_bytes(path: Path) -> int:
    """The size of a JSON file's text: a plain file's size; an xz file's from its streams'
    indexes (:func:`_xz_size`); a gzip file's from its trailer (ISIZE), which is the size
    of its last member only and modulo 4 GiB, so where the file has several members (bgzip,
    ``cat a.gz b.gz``) or ISIZE is below what the compression ratio of the first
    :data:`SAMPLE_BYTES` of text gives for the whole file, that estimate (:func:`json_shape`
    says which)."""
    return _text_and_sample(path)[0]


def _text_and_sample(path: Path) -> tuple[int, str, bytes]:
    """(the text's size, how it was estimated where not exact, the text's first bytes)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(6)
        f.seek(0)
        if head == b"\xfd7zXZ\x00":
            sample, _, _, whole = _inflate_head(f, lzma.LZMADecompressor)
            return (len(sample) if whole else _xz_size(f, size)), "", sample
        if head[:2] != b"\x1f\x8b" or size < 18:
            return size, "", f.read(SAMPLE_BYTES)
        sample, used, members, whole = _inflate_head(f, lambda: zlib.decompressobj(31))
        if whole:
            return len(sample), "", sample
        f.seek(-4, os.SEEK_END)
        isize = int.from_bytes(f.read(4), "little")
    by_ratio = int(size * len(sample) / max(used, 1))
    if members > 1 or isize < by_ratio:
        return max(isize, by_ratio), (f"its text estimated at {_mib(max(isize, by_ratio))} from the compression "
                                      f"ratio of its first {_mib(len(sample))}"), sample
    return (max(isize, 10 * size) if 40 * size >= 1 << 32 else isize), "", sample


def _inflate_head(f: BinaryIO, new: Callable[[], Any]) -> tuple[bytes, int, int, bool]:
    """The first :data:`SAMPLE_BYTES` (or a little more) of a gzip or xz file's text, the compressed bytes
    that gave them, the members (streams) met, and whether that was the whole file."""
    out: list[bytes] = []
    got = used = 0
    members = 1
    d = new()
    try:
        while got < SAMPLE_BYTES:
            chunk = f.read(1 << 14)  # at most 1032 times as much text: 16 MiB
            if not chunk:
                return b"".join(out), used, members, True
            used += len(chunk)
            while chunk:
                part = d.decompress(chunk)
                out.append(part)
                got += len(part)
                if not d.eof:
                    break
                chunk = d.unused_data.lstrip(b"\0")  # the next member (xz: after its padding)
                if chunk:
                    members += 1
                    d = new()
    except (zlib.error, lzma.LZMAError, EOFError):  # damaged: said when it is read
        pass
    return b"".join(out), used, members, False


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


#: a bound above every need per byte of JSON text measured (docs/reliability.md: 8.1 at
#: most, ``summary --json`` of a compact trace), and the most a compressed JSON trace is
#: taken to have shrunk: where even that bound fits in half the memory available, the
#: traces are not sampled (:func:`clearly_fits`)
UPPER_PER_BYTE = 12
UPPER_RATIO = {b"\x1f\x8b": 25, b"\xfd7zXZ\x00": 40, b"(\xb5/\xfd": 40, b"BZh": 40}  # gzip, xz, zstd, bzip2
#: files looked at under the folders :func:`clearly_fits` is given, at most
_UPPER_FILES = 10_000


def clearly_fits(paths: list[str]) -> bool:
    """Whether files (or folders of them) fit whatever the command and however their
    text is made: :data:`BASE_BYTES` plus :data:`UPPER_PER_BYTE` per byte of their text at
    :data:`UPPER_RATIO` (by their first bytes) at most half the memory available. Only
    their sizes and first bytes are read, so the common case pays no sample of the text
    (tens of ms a file); False where unsure (then each command's estimate is made)."""
    if os.environ.get("POLYPROF_MEMORY_CHECK", "1") == "0":
        return True
    text, seen = 0, 0
    for top in paths:
        walk = [(str(top), [], [""])] if not os.path.isdir(top) else os.walk(top)
        for folder, _, names in walk:
            for name in names:
                seen += 1
                f = os.path.join(folder, name) if name else folder
                try:
                    st = os.stat(f)
                    if not stat_mod.S_ISREG(st.st_mode):  # (a FIFO would block the open: no rank a folder holds)
                        if name:
                            continue
                        return False
                    with open(f, "rb") as fh:  # (compressed or not by its first bytes, whatever its name)
                        head = fh.read(6)
                except OSError:
                    return False
                text += st.st_size * next((r for m, r in UPPER_RATIO.items() if head.startswith(m)), 1)
                if seen > _UPPER_FILES:
                    return False
    return BASE_BYTES + UPPER_PER_BYTE * text <= available_bytes() // 2


def check_fits(what: str, need: int, hint: str) -> None:
    """Raise one line when ``need`` bytes exceed what this process may use."""
    if os.environ.get("POLYPROF_MEMORY_CHECK", "1") == "0":
        return
    avail = available_bytes()
    if need > avail:
        raise NotEnoughMemoryError(
            f"{what}: needs about {_mib(need)} of memory to analyse, {_mib(avail)} is available here; "
            f"{hint} (POLYPROF_MEMORY_CHECK=0 tries anyway)")


class NotEnoughMemoryError(PolyprofError):
    """A trace that would not fit in the memory this process may use: said before it is
    read, with what it needs and what is available."""


def json_need(text_bytes: int, command: str = "summary") -> int:
    """What ``command`` needs to read ``text_bytes`` of Kineto / Chrome JSON whole."""
    return BASE_BYTES + int(JSON_FACTORS.get(command, max(JSON_FACTORS.values())) * text_bytes)


def shape_need(shape: JsonShape, command: str = "summary") -> int:
    """What ``command`` needs to read a JSON trace of that shape whole: by
    :data:`SHAPE_FACTORS` where it names the command, else by its text
    (:func:`json_need`)."""
    if command not in SHAPE_FACTORS:
        return json_need(shape.text, command)
    per_event, per_launch, per_byte, per_name = SHAPE_FACTORS[command]
    return BASE_BYTES + int(per_event * shape.events + per_launch * shape.launched + per_byte * shape.dense
                            + per_name * shape.names)


def store_need(events: int, command: str = "summary") -> int:
    """What ``command`` needs to read ``events`` events of a store whole (``export:FORMAT``:
    the measured chrome export's need, scaled by :data:`EXPORT_FACTORS` where that
    format needs more than chrome; no less than it for any)."""
    if command.startswith("export:"):
        scale = max(JSON_FACTORS.get(command, JSON_FACTORS["export"]) / EXPORT_FACTORS["chrome"], 1.0)
        return BASE_BYTES + int(STORE_FACTORS["export"] * scale) * events
    return BASE_BYTES + STORE_FACTORS.get(command, max(STORE_FACTORS.values())) * events


def command_label(command: str) -> str:
    """How a refusal names ``command``: ``summary --json``, ``export -f xspace``."""
    return command.replace("-json", " --json").replace("export:", "export -f ")


_FILE_HINT = ("convert it to a store first (polyprof convert {p} -o STORE streams it in chunks); polyprof summary "
              "STORE then summarises it window by window within the memory bound, and polyprof sql STORE queries "
              "it with a memory limit")


def check_file(path: str | Path, command: str = "summary") -> None:
    """A Kineto / Chrome JSON file to be read whole by ``command`` (:func:`shape_need`)."""
    p = Path(path)
    shape = json_shape(p)
    how = f", {shape.how}" if shape.how else ""
    check_fits(f"{p} (polyprof {command_label(command)}{how})", shape_need(shape, command),
               _FILE_HINT.format(p=p))


def check_xspace(path: str | Path, command: str = "summary", implementation: str = "c") -> None:
    """An XSpace file to be read whole by ``command`` (protobuf has no streaming read):
    :data:`XSPACE_FACTORS` of its text by the reader's ``implementation``."""
    p = Path(path)
    text, how, _ = _text_and_sample(p)
    by = "protobuf's Python objects (no compiled reader here)" if implementation == "python" else "the compiled reader"
    check_fits(f"{p} (polyprof {command_label(command)}, an XSpace of {_mib(text)} read whole by {by}"
               f"{', ' + how if how else ''})", BASE_BYTES + int(XSPACE_FACTORS.get(implementation, 18.0) * text),
               "an XSpace is read whole: analyse it where more memory is available")


def check_store_rank(store: str | Path, rank: int, events: int, command: str = "summary") -> None:
    """A store's rank of ``events`` events to be read back whole and analysed (a rank
    summarised window by window, ranks/stepwise.py, keeps to the memory bound instead)."""
    check_fits(f"{store}: rank {rank} ({events:,} events, polyprof {command_label(command)})",
               store_need(events, command),
               "query it with polyprof sql STORE, which is memory-limited, or analyse it on a machine with more memory")


def _mib(n: int) -> str:
    """Bytes in MiB, whole: two sizes that differ read differently (in GiB to one place,
    0.8 GiB needed and 0.8 GiB available did not)."""
    return f"{n / 2**20:,.0f} MiB"
