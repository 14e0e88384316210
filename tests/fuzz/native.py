"""Inputs for the compiled parsers (scripts/fuzz_native.py, tests/test_fuzz_native.py).

Each parser family gets seeds made deterministically from the real files in tests/data
(Kineto JSON with flows, args and ``[memory]`` events; Perfetto's own test traces as
binary protobuf and polyprof's Perfetto export; XSpace; Nsight Systems SQLite), and each
input is 1-3 byte-level edits of one seed, chosen to hit what a C parser trusts:
truncations, bit flips, byte insertions and deletions, splices, huge or overlong varints
and length prefixes (protobuf), deep nesting, unterminated strings, invalid UTF-8, broken
escapes and numbers at the int64/uint64/double edges (JSON), and now and then the
structure-aware mutators of ``mutators.py`` first.

``exercise`` then drives every compiled pass a loaded trace reaches: the Kineto args
walk (``_args``: some keys for a few rows, then every key), the ``[memory]`` columns,
and (``deep``) the summary's tables (the critical path's ``_longest`` included) and the
Perfetto and XSpace writers (``_perfetto_wire``, ``_wire``).

An input is named by (parser, seed, index) and regenerated from those three.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CORPUS_SEEDS = DATA / "corpus" / "seeds"
REPRODUCERS = DATA / "fuzz_native"

#: parser family -> the file suffix its inputs are written with
SUFFIX = {"kineto": ".json", "perfetto": ".pftrace", "xspace": ".xplane.pb", "sqlite": ".sqlite"}
PARSERS = tuple(SUFFIX)

# --------------------------------------------------------------------------- seeds


def _memory_seed() -> bytes:
    """The TraceLens H100 trace cut to its first 300 events of each category (``[memory]``
    events included), with its metadata and device properties."""
    path = DATA / "peers" / "tracelens_perf" / "h100_Falconsai_nsfw_image_detection__1016002.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    seen: dict[str, int] = {}
    kept = []
    for e in doc["traceEvents"]:
        c = str(e.get("cat", e.get("ph")))
        seen[c] = seen.get(c, 0) + 1
        if seen[c] <= 300:
            kept.append(e)
    doc["traceEvents"] = kept
    return json.dumps(doc).encode()


def _kineto_seeds() -> list[tuple[str, bytes]]:
    from .seeds import reader_of  # the Kineto seeds only (others end .json too: rocprofv3, memory timeline)

    out = [(p.name, p.read_bytes()) for p in sorted(CORPUS_SEEDS.glob("*.json")) if reader_of(p.name) == "kineto"]
    out.append(("gloo_rank0.json", gzip.decompress((DATA / "traces" / "gloo" / "gloo_rank0.json.gz").read_bytes())))
    out.append(("tracelens_memory.json", _memory_seed()))
    return out


def _perfetto_seeds() -> list[tuple[str, bytes]]:
    """Perfetto's own test traces (text protos) as the binary files a producer writes,
    and polyprof's Perfetto export of a real Kineto trace."""
    from google.protobuf import text_format

    import polyprof
    from polyprof.formats.perfetto_read import trace_pb2
    from polyprof.writers import perfetto

    out = []
    for p in sorted([*(DATA / "perfetto").glob("*.textproto"), *(DATA / "peers" / "perfetto").glob("*.textproto")]):
        msg = trace_pb2.Trace()
        try:
            text_format.Parse(p.read_text(), msg, allow_unknown_field=True)
        except text_format.ParseError:
            continue
        out.append((p.stem + ".pftrace", msg.SerializeToString()))
    trace = polyprof.load(DATA / "traces" / "kineto" / "cuda_event_sync_multistream.json.gz")
    out.append(("cuda_event_sync_multistream.pftrace", b"".join(perfetto.packets(trace))))
    return out


def _xspace_seeds() -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(CORPUS_SEEDS.glob("*.xplane.pb"))]


def _sqlite_seeds() -> list[tuple[str, bytes]]:
    from .sqlite_mutators import build_seeds

    return [(n, d) for n, d in build_seeds("nsys")]


SEEDS: dict[str, Callable[[], list[tuple[str, bytes]]]] = {
    "kineto": _kineto_seeds, "perfetto": _perfetto_seeds, "xspace": _xspace_seeds, "sqlite": _sqlite_seeds}


def load_seeds(parser: str) -> list[tuple[str, bytes]]:
    return SEEDS[parser]()


# --------------------------------------------------------------------------- byte edits
INT_EDGES = [b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
             b"18446744073709551615", b"18446744073709551616", b"-0", b"1e309", b"-1e309", b"1e-400", b"4.9e-324",
             b"1.7976931348623157e308", b"0.0000000000000000000000001", b"99999999999999999999999999999999.5",
             b"1e", b"-", b".5", b"01", b"0x10", b"1.", b"-.", b"+1", b"1e+", b"NaN", b"Infinity", b"1" * 400]
BAD_STRING_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\x80", b"\x00", b"\\", b"\\u12",
                    b"\\ud800", b"\\udc00\\u0000", b"\\x41", b"\\u00zz", b"\\", b"\"", b"\n", b"\\\""]
INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x01", b"\xfe"]
# varints a decoder must bound: 2^63, 2^64 - 1, overlong (11 bytes), unterminated
HUGE_VARINTS = [b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\xff" * 9 + b"\x01", b"\xff" * 10 + b"\x01",
                b"\xff" * 12, b"\x80" * 10, b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07"]
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _pos(data: bytes, rnd: random.Random) -> int:
    return rnd.randrange(len(data) + 1)


def truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[:_pos(data, rnd)]


def bit_flips(data: bytes, rnd: random.Random) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rnd.randint(1, 8)):
        i = rnd.randrange(len(b))
        b[i] ^= 1 << rnd.randrange(8)
    return bytes(b)


def insert_bytes(data: bytes, rnd: random.Random) -> bytes:
    i = _pos(data, rnd)
    if rnd.random() < 0.5:
        chunk = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
    else:
        chunk = rnd.choice(INTERESTING) * rnd.randint(1, 8)
    return data[:i] + chunk + data[i:]


def delete_bytes(data: bytes, rnd: random.Random) -> bytes:
    i = _pos(data, rnd)
    return data[:i] + data[i + rnd.randint(1, 32):]


def overwrite(data: bytes, rnd: random.Random) -> bytes:
    if not data:
        return data
    i = rnd.randrange(len(data))
    chunk = rnd.choice(INTERESTING) * rnd.randint(1, 8)
    return data[:i] + chunk + data[i + len(chunk):]


def splice(data: bytes, rnd: random.Random) -> bytes:
    """A run of the input copied over or into another place of it."""
    if len(data) < 2:
        return data
    a = rnd.randrange(len(data))
    run = data[a:a + rnd.randint(1, 256)]
    i = _pos(data, rnd)
    return data[:i] + run + data[i + (len(run) if rnd.random() < 0.5 else 0):]


def huge_varint(data: bytes, rnd: random.Random) -> bytes:
    """A huge, overlong or unterminated varint put where one is read: after a tag byte
    (as a value or a length prefix) or anywhere."""
    tags = [i for i in range(min(len(data), 1 << 16)) if data[i] & 7 in (0, 2) and data[i] >> 3]
    v = rnd.choice(HUGE_VARINTS)
    if tags and rnd.random() < 0.8:
        i = rnd.choice(tags) + 1
        j = i
        while j < len(data) and data[j] & 0x80:
            j += 1
        return data[:i] + v + data[min(j + 1, len(data)):]
    i = _pos(data, rnd)
    return data[:i] + v + data[i:]


def length_prefix(data: bytes, rnd: random.Random) -> bytes:
    """A length-delimited field's length made a little or a lot larger or smaller."""
    tags = [i for i in range(min(len(data) - 1, 1 << 16)) if data[i] & 7 == 2 and data[i] >> 3 and
            not data[i + 1] & 0x80]
    if not tags:
        return huge_varint(data, rnd)
    i = rnd.choice(tags) + 1
    n = max(0, data[i] + rnd.choice([-2, -1, 1, 2, 3, 64, 127 - data[i]]))
    return data[:i] + bytes([min(n, 127)]) + data[i + 1:]


VALID_NUMBERS = [b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
                 b"18446744073709551615", b"18446744073709551616", b"-0", b"1e308", b"4.9e-324", b"-1e-400",
                 b"1.7976931348623157e308", b"9.2233720368547758e18", b"0.0000001", b"1" * 40, b"-1", b"0"]
ODD_STRINGS = [b"\\u0000", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\\"", b"\\\\", b"\\/", b"\xc3\xa9",
               b"\xe2\x80\xa8", b"a" * 5000, b"[memory]", b"ac2g", b"", b"\\n\\t"]


def _member_place(data: bytes, rnd: random.Random) -> int | None:
    """Just after a ``{`` (where a new member keeps the JSON valid), or None."""
    places = [m.end() for m in re.finditer(rb"\{\s*\"", data[: 1 << 19])]
    return rnd.choice(places) if places else None


def _new_member(data: bytes, rnd: random.Random, value: bytes) -> bytes:
    i = _member_place(data, rnd)
    if i is None:
        return data
    i -= 1  # before the opening quote of the first member
    key = rnd.choice([b"args", b"ts", b"dur", b"id", b"pid", b"tid", b"name", b"cat", b"ph", b"Bytes", b"Addr",
                      b"Input Dims", b"correlation", b"External id", b"zz"])
    return data[:i] + b'"' + key + b'":' + value + b"," + data[i:]


def deep_nesting(data: bytes, rnd: random.Random) -> bytes:
    n = rnd.choice([64, 1000, 20000, 200000])
    open_, close = rnd.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'{"args":{"x":[', b"]}}")])
    if rnd.random() < 0.6:
        return _new_member(data, rnd, open_ * n + b"1" + close * n)
    i = _pos(data, rnd)
    tail = close * n if rnd.random() < 0.5 else b""
    return data[:i] + open_ * n + tail + data[i:]


def _string_places(data: bytes) -> list[int]:
    return [m.start() for m in re.finditer(rb'"', data[: 1 << 18])]


def unterminated(data: bytes, rnd: random.Random) -> bytes:
    """Cut just after an opening quote, or a closing quote removed."""
    q = _string_places(data)
    if not q:
        return truncate(data, rnd)
    i = rnd.choice(q)
    return data[:i + 1] if rnd.random() < 0.4 else data[:i] + data[i + 1:]


def bad_string(data: bytes, rnd: random.Random) -> bytes:
    """Invalid UTF-8 or a broken escape inside a string; or a valid but odd string (escapes,
    lone surrogates, line separators, long) as a new member's value."""
    if rnd.random() < 0.5:
        return _new_member(data, rnd, b'"' + rnd.choice(ODD_STRINGS) * rnd.randint(1, 3) + b'"')
    q = _string_places(data)
    i = rnd.choice(q) + 1 if q else _pos(data, rnd)
    return data[:i] + rnd.choice(BAD_STRING_BYTES) + data[i:]


def edge_number(data: bytes, rnd: random.Random) -> bytes:
    """A number replaced by one at the int64/uint64/double edges or a malformed one."""
    nums = list(_NUMBER.finditer(data[: 1 << 18]))
    if not nums:
        return insert_bytes(data, rnd)
    m = rnd.choice(nums)
    return data[:m.start()] + rnd.choice(VALID_NUMBERS if rnd.random() < 0.7 else INT_EDGES) + data[m.end():]


U64 = [0, 1, 2, 63, 64, 127, 128, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _perfetto_packet(pk: Any, rnd: random.Random) -> None:
    """One packet's sequence, time, clock, flags or track event fields set to edge values."""
    r = rnd.random()
    if r < 0.2:
        pk.trusted_packet_sequence_id = rnd.choice([0, 1, 2, 2**31, 2**32 - 1, rnd.randrange(1, 1 << 20)])
    elif r < 0.3:
        pk.sequence_flags = rnd.choice([0, 1, 2, 3, 2**32 - 1])
        pk.incremental_state_cleared = rnd.random() < 0.5
    elif r < 0.4:
        pk.previous_packet_dropped = rnd.choice([0, 1, 2**32 - 1])
    elif r < 0.5:
        pk.timestamp = rnd.choice(U64)
    elif r < 0.6:
        pk.timestamp_clock_id = rnd.choice([0, 1, 3, 6, 63, 64, 100, 127, 128, 2**32 - 1])
    elif pk.HasField("track_event"):
        te = pk.track_event
        f = rnd.randrange(7)
        if f == 0:
            te.track_uuid = rnd.choice(U64)
        elif f == 1:
            te.name_iid = rnd.choice(U64)
        elif f == 2:
            te.type = rnd.choice([0, 1, 2, 3, 4, 5, -1, 2**31 - 1])
        elif f == 3:
            te.category_iids.extend(rnd.choice(U64) for _ in range(rnd.randint(1, 4)))
        elif f == 4:
            te.flow_ids.extend(rnd.choice(U64) for _ in range(rnd.randint(1, 4)))
            te.terminating_flow_ids.append(rnd.choice(U64))
        elif f == 5:
            a = te.debug_annotations.add()
            a.name_iid = rnd.choice(U64)
            a.uint_value = rnd.choice(U64)
        else:
            te.counter_value = rnd.choice([-(2**63), 2**63 - 1, 0, -1])


def perfetto_structure(data: bytes, rnd: random.Random) -> bytes:
    """Packets re-written with edge values where the walk trusts them: sequence ids (and,
    now and then, a sequence of its own for every packet), flags, clocks, times, track
    uuids, interned ids, types, flows, annotations, counters."""
    from google.protobuf.message import DecodeError

    from polyprof.formats.perfetto_read import trace_pb2

    t = trace_pb2.Trace()
    try:
        t.ParseFromString(data)
    except DecodeError:
        return data
    packets = list(t.packet)
    if not packets:
        return data
    if rnd.random() < 0.1:
        base = rnd.choice([1, 64, 1 << 16, 2**31])
        for i, pk in enumerate(packets * rnd.choice([1, 4, 40])):
            t.packet.add().CopyFrom(pk)
            t.packet[-1].trusted_packet_sequence_id = (base + i * rnd.choice([1, 64])) & 0xFFFFFFFF
    for pk in rnd.sample(packets, min(len(packets), rnd.randint(1, 8))):
        _perfetto_packet(pk, rnd)
    return t.SerializeToString()


GENERIC = (truncate, bit_flips, insert_bytes, delete_bytes, overwrite, splice)
EDITS: dict[str, tuple[Callable[[bytes, random.Random], bytes], ...]] = {
    "kineto": GENERIC + (unterminated,) + (deep_nesting, bad_string, edge_number) * 3,
    "perfetto": GENERIC + (huge_varint, length_prefix) * 3 + (perfetto_structure,) * 6,
    "xspace": GENERIC + (huge_varint, length_prefix) * 3,
    "sqlite": GENERIC,
}


def mutate(parser: str, seeds: list[tuple[str, bytes]], seed: int, index: int) -> tuple[str, bytes]:
    """The ``index``-th input of a run with ``seed``: (the seed file's name, bytes)."""
    rnd = random.Random(f"native:{parser}:{seed}:{index}")
    name, data = rnd.choice(seeds)
    if parser in ("kineto", "xspace", "sqlite") and rnd.random() < (0.4 if parser == "kineto" else 0.2):
        from . import mutators

        structured = {"kineto": mutators.kineto, "xspace": mutators.xspace, "sqlite": mutators.sqlite}[parser]
        data = structured(data, rnd, [d for _, d in seeds])
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        data = rnd.choice(EDITS[parser])(data, rnd)
    return name, data


# --------------------------------------------------------------------------- use of what loaded
def exercise(trace: object, deep: bool, tmp: Path) -> None:
    """Drive the compiled passes a loaded trace reaches (see the module's docstring)."""
    import numpy as np

    from polyprof.formats.kineto.args import _ARG_KEYS
    from polyprof.trace.core import Trace

    assert isinstance(trace, Trace)
    stats = trace.stats
    n = trace.n_events
    if stats.pending:
        keys = sorted({_ARG_KEYS.get(a, a) for a in ("Input Dims", "Input type", "Concrete Inputs", "grid", "block",
                                                      "stream", "Sequence number", "Bytes", "Addr")})
        stats.lookup_rows(keys, np.arange(0, n, max(1, n // 200), dtype=np.int64))
    for key in list(stats):
        stats[key]
    if deep:
        from polyprof.analyze import registry
        from polyprof.writers import perfetto, xspace

        registry.compute_all(trace)
        perfetto.write(trace, tmp / "out.pftrace")
        xspace.write(trace, tmp / "out.xplane.pb")
