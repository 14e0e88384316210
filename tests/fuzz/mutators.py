"""Structure-aware mutators: one real input and a ``random.Random`` -> a damaged input.

Each format is mutated where its reader has to trust something: JSON values of the
wrong type or range (Kineto), protobuf fields and references between planes, lines,
events and metadata (XSpace), Arrow tables and the header of a ``.polyprof`` zip
re-written with valid CRCs (native), Arrow stream batches and the header of a crash
journal (journal), and the declared uncompressed lengths of compressed Arrow buffers
(native and journal). A share of every format also gets plain byte-level damage (bit
flips, cuts, splices), the kind a disk error or a cut-off copy makes.

Everything is deterministic in the ``random.Random`` given, so an input is named by
(reader, seed, index) and regenerated from those three (runner.py).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import struct
import zipfile
from typing import Any, Callable

# --------------------------------------------------------------------------- values
HUGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, 10**30,
             -10**30, 10**400]
FLOATS = [0.5, -0.0, 1e-300, 1e300, -1e300, 1.7976931348623157e308, 9.3e18, -9.3e18, 1e19]
STRINGS = ["", "x", "0x", "0xZZ", "-1", "1e999", "nan", "NaN", "inf", "</script>", "<!--<script>", "__DATA__",
           "__TITLE__", "\" onerror=alert(1) x=\"", "[memory]", "[bold]x[/bold]", "a" * 3000, "é\u2028\u2029",
           "\x00", ":", "1:2", "a:b:c", "1:2:x:y", ",", "{", "[]", "{\"kind\": 1}"]


def hostile_value(rnd: random.Random, depth: int = 0) -> Any:
    """A JSON value chosen to break assumptions: out-of-range numbers, wrong types, nesting."""
    r = rnd.random()
    if r < 0.3:
        return rnd.choice(HUGE_INTS)
    if r < 0.45:
        return rnd.choice(FLOATS)
    if r < 0.65:
        return rnd.choice(STRINGS)
    if r < 0.72:
        return rnd.choice([None, True, False])
    if r < 0.82 or depth > 2:
        return [] if rnd.random() < 0.5 else {}
    if r < 0.91:
        return [hostile_value(rnd, depth + 1) for _ in range(rnd.randint(1, 3))]
    return {rnd.choice(["ph", "ts", "dur", "pid", "tid", "name", "args", "id", "cat"]): hostile_value(rnd, depth + 1)}


def deep_nest(rnd: random.Random) -> Any:
    v: Any = 1
    for _ in range(rnd.choice([50, 300, 1200])):
        v = [v] if rnd.random() < 0.5 else {"a": v}
    return v


# --------------------------------------------------------------------------- bytes
def _interesting_int(rnd: random.Random) -> bytes:
    v = rnd.choice([0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x7FFFFFFF, -0x80000000, 0xFFFFFFFF, 2**63 - 1, -2**63])
    fmt = rnd.choice(["<b", "<i", "<q", ">i", "<h"]) if -128 <= v < 128 else rnd.choice(["<i", "<q", ">i"])
    try:
        return struct.pack(fmt, v)
    except struct.error:
        return struct.pack("<q", v if -2**63 <= v < 2**63 else -1)


def byte_mutate(data: bytes, rnd: random.Random, start: int = 0, others: list[bytes] | None = None) -> bytes:
    """1-4 byte-level edits at or after ``start``: flips, sets, inserts, deletes, copies, cuts, splices."""
    b = bytearray(data)
    for _ in range(rnd.choice([1, 1, 1, 2, 3, 4])):
        n = len(b)
        if n <= start:
            b += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
            continue
        i = rnd.randrange(start, n)
        op = rnd.random()
        if op < 0.3:
            b[i] ^= 1 << rnd.randrange(8)
        elif op < 0.45:
            b[i] = rnd.choice([0, 0xFF, 0x7F, 0x80, rnd.randrange(256)])
        elif op < 0.55:
            v = _interesting_int(rnd)
            b[i:i + len(v)] = v
        elif op < 0.65:
            b[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
        elif op < 0.75:
            del b[i:i + rnd.randint(1, 64)]
        elif op < 0.83:
            j = rnd.randrange(start, n)
            k = rnd.randint(1, 256)
            b[i:i] = b[j:j + k]
        elif op < 0.92:
            del b[max(i, start + 1):]
        elif others:
            o = rnd.choice(others)
            if o:
                j = rnd.randrange(len(o))
                b[i:i + rnd.randint(1, 512)] = o[j:j + rnd.randint(1, 512)]
    return bytes(b)


# --------------------------------------------------------------------------- JSON
def _nodes(doc: Any, limit: int = 4000) -> list[tuple[Any, Any]]:
    """(container, key) of up to ``limit`` places in a JSON tree, breadth first."""
    out: list[tuple[Any, Any]] = []
    todo = [doc]
    while todo and len(out) < limit:
        c = todo.pop(0) if len(todo) < 64 else todo.pop()
        items = c.items() if isinstance(c, dict) else enumerate(c)
        for k, v in items:
            out.append((c, k))
            if isinstance(v, (dict, list)):
                todo.append(v)
    return out


def _events(doc: Any) -> list[Any]:
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc["traceEvents"]
    return doc if isinstance(doc, list) else []


def json_mutate_doc(doc: Any, rnd: random.Random) -> Any:
    """Edits to a parsed Kineto/Chrome document (in place where possible); returns the document."""
    for _ in range(rnd.choice([1, 1, 2, 3, 5])):
        evs = _events(doc)
        op = rnd.random()
        if op < 0.35 and evs:
            e = rnd.choice(evs)
            if isinstance(e, dict):
                key = rnd.choice(["ph", "ts", "dur", "pid", "tid", "name", "cat", "args", "id", "bp", "s", "tts"]
                                 + list(e))
                e[key] = hostile_value(rnd) if rnd.random() < 0.85 else rnd.choice("XBEiIbensftCMPONDR")
        elif op < 0.45 and evs:
            e = rnd.choice(evs)
            if isinstance(e, dict) and isinstance(e.get("args"), dict):
                args = e["args"]
                key = rnd.choice(["correlation", "External id", "stream", "device", "Input Dims", "labels", "name",
                                  "sort_index", "stream_id", "Collective name"] + list(args))
                args[key] = hostile_value(rnd)
        elif op < 0.55:
            nodes = _nodes(doc)
            if nodes:
                c, k = rnd.choice(nodes)
                c[k] = hostile_value(rnd)
        elif op < 0.62:
            nodes = _nodes(doc)
            if nodes:
                c, k = rnd.choice(nodes)
                if isinstance(c, dict):
                    del c[k]
                else:
                    c.pop(k)
        elif op < 0.7 and evs:
            evs.insert(rnd.randrange(len(evs) + 1), json.loads(json.dumps(rnd.choice(evs))))
        elif op < 0.76 and len(evs) > 1:
            a, b = rnd.randrange(len(evs)), rnd.randrange(len(evs))
            if isinstance(evs[a], dict) and isinstance(evs[b], dict):
                k = rnd.choice(["ts", "dur", "pid", "tid", "ph", "id"])
                evs[a][k], evs[b][k] = evs[b].get(k), evs[a].get(k)
        elif op < 0.8 and isinstance(doc, dict):
            key = rnd.choice(["deviceProperties", "distributedInfo", "displayTimeUnit", "baseTimeNanoseconds",
                              "traceName", "schemaVersion", "traceEvents"])
            doc[key] = hostile_value(rnd)
        elif op < 0.83:
            nodes = _nodes(doc)
            if nodes:
                c, k = rnd.choice(nodes)
                c[k] = deep_nest(rnd)
        elif op < 0.88 and evs:
            del evs[rnd.randrange(len(evs)):]
        elif evs:
            e = rnd.choice(evs)
            if isinstance(e, dict):
                e["ph"] = rnd.choice("XBEiIbensftCMPOND")
                if rnd.random() < 0.5:
                    e["id"] = hostile_value(rnd)
    return doc


def json_text(doc: Any, rnd: random.Random) -> bytes:
    """Serialise, sometimes with text the JSON parser must refuse (NaN, Infinity) or odd spacing."""
    try:
        text = json.dumps(doc, allow_nan=True, indent=rnd.choice([None, None, 1]))
    except (RecursionError, ValueError):
        text = "[" * 100000
    return text.encode("utf-8", "surrogatepass")


def kineto(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    gz = data[:2] == b"\x1f\x8b"
    if gz and rnd.random() < 0.2:  # damage the compressed stream itself
        return byte_mutate(data, rnd, 10, others)
    raw = gzip.decompress(data) if gz else data
    r = rnd.random()
    if r < 0.3:  # the text itself: cuts, brackets, escapes, bytes (json_mutators.py)
        from .json_mutators import json_bytes

        out = json_bytes(raw, rnd)
    elif r < 0.8:
        try:
            out = json_text(json_mutate_doc(json.loads(raw), rnd), rnd)
        except (ValueError, RecursionError):
            out = byte_mutate(raw, rnd, 0, others)
        if rnd.random() < 0.15:
            out = byte_mutate(out, rnd, 0, others)
    else:
        out = byte_mutate(raw, rnd, 0, others)
    return gzip.compress(out, compresslevel=1, mtime=0) if gz else out


# --------------------------------------------------------------------------- XSpace
def _pick(rnd: random.Random, seq: Any) -> Any:
    return seq[rnd.randrange(len(seq))] if len(seq) else None


def _any_int(rnd: random.Random, signed: bool = True) -> int:
    v = rnd.choice([0, 1, -1, 2**31, 2**32 + 5, 2**53, 2**62, 2**63 - 1, -2**63, 12345, rnd.randrange(1 << 20)])
    return v if signed else v & (2**64 - 1)


def _mutate_stat(st: Any, rnd: random.Random, stat_ids: list[int]) -> None:
    op = rnd.random()
    if op < 0.25:
        st.metadata_id = rnd.choice(stat_ids + [_any_int(rnd, False) % 2**63]) if stat_ids else 999999
    elif op < 0.45:
        st.str_value = rnd.choice(STRINGS)
    elif op < 0.6:
        st.int64_value = _any_int(rnd)
    elif op < 0.7:
        st.uint64_value = _any_int(rnd, False)
    elif op < 0.8:
        st.double_value = rnd.choice(FLOATS + [float("nan"), float("inf")])
    elif op < 0.9:
        st.ref_value = rnd.choice(stat_ids + [_any_int(rnd, False)]) if stat_ids else 7
    else:
        st.bytes_value = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 40)))


def xspace_mutate_space(space: Any, rnd: random.Random) -> None:
    for _ in range(rnd.choice([1, 1, 2, 3, 6])):
        plane = _pick(rnd, space.planes)
        if plane is None:
            return
        stat_ids = list(plane.stat_metadata)
        op = rnd.random()
        line = _pick(rnd, plane.lines)
        ev = _pick(rnd, line.events) if line is not None else None
        if op < 0.2 and ev is not None:
            f = rnd.choice(["metadata_id", "offset_ps", "duration_ps", "num_occurrences"])
            setattr(ev, f, _any_int(rnd))
        elif op < 0.4 and ev is not None and ev.stats:
            _mutate_stat(_pick(rnd, ev.stats), rnd, stat_ids)
        elif op < 0.5 and plane.stats:
            _mutate_stat(_pick(rnd, plane.stats), rnd, stat_ids)
        elif op < 0.58 and line is not None:
            f = rnd.choice(["id", "display_id", "timestamp_ns", "duration_ps"])
            setattr(line, f, _any_int(rnd))
            if rnd.random() < 0.3:
                line.name = rnd.choice(STRINGS + ["Steps", "Counters", "XLA Ops", "Stream #1(compute)"])
        elif op < 0.66:
            plane.name = rnd.choice(["/device:GPU:0", "/device:TPU:999999999999999999999", "/device:", "/host:CPU",
                                     "Task Environment", "/host:metadata"] + STRINGS)
            if rnd.random() < 0.3:
                plane.id = _any_int(rnd)
        elif op < 0.74 and stat_ids:
            mid = rnd.choice(stat_ids)
            sm = plane.stat_metadata[mid]
            if rnd.random() < 0.5:
                sm.name = rnd.choice(["polyprof.layout", "polyprof.flow_out", "polyprof.flow_in", "polyprof.metadata",
                                      "polyprof.origin_ns", "polyprof.producer", "polyprof.aliases", "category",
                                      "polyprof.generated", "profile_start_time", "profile_stop_time", "flow"] + STRINGS)
            else:
                sm.id = _any_int(rnd)
        elif op < 0.82 and plane.event_metadata:
            mid = rnd.choice(list(plane.event_metadata))
            em = plane.event_metadata[mid]
            sub = rnd.random()
            if sub < 0.3:
                del plane.event_metadata[mid]
            elif sub < 0.5:
                em.name = rnd.choice(STRINGS)
            elif sub < 0.7 and em.stats:
                _mutate_stat(_pick(rnd, em.stats), rnd, stat_ids)
            elif sub < 0.85:
                em.child_id.append(_any_int(rnd))
            else:
                em.metadata = bytes(rnd.randrange(256) for _ in range(8))
        elif op < 0.88 and line is not None and line.events:
            del line.events[rnd.randrange(len(line.events)):]
        elif op < 0.93 and ev is not None:
            st = ev.stats.add()
            st.metadata_id = rnd.choice(stat_ids) if stat_ids else 1
            _mutate_stat(st, rnd, stat_ids)
        else:
            rnd.choice([space.hostnames, space.errors, space.warnings]).append(rnd.choice(STRINGS))


def xspace(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    from polyprof.formats import xplane_pb2

    gz = data[:2] == b"\x1f\x8b"
    if gz and rnd.random() < 0.2:
        return byte_mutate(data, rnd, 10, others)
    raw = gzip.decompress(data) if gz else data
    if rnd.random() < 0.7:
        space = xplane_pb2.XSpace()
        space.ParseFromString(raw)
        xspace_mutate_space(space, rnd)
        out = space.SerializeToString()
        if rnd.random() < 0.1:
            out = byte_mutate(out, rnd, 0, others)
    else:
        out = byte_mutate(raw, rnd, 0, others)
    return gzip.compress(out, compresslevel=1, mtime=0) if gz else out


# --------------------------------------------------------------------------- Arrow
def arrow_mutate_table(table: Any, rnd: random.Random) -> Any:
    """A table with one column's values, type or length changed (read back by the reader)."""
    import pyarrow as pa

    if table.num_columns == 0:
        return table
    i = rnd.randrange(table.num_columns)
    col = table.column(i)
    n = len(col)
    op = rnd.random()
    if op < 0.4 and n:
        vals = col.to_pylist()
        for _ in range(rnd.randint(1, 3)):
            j = rnd.randrange(n)
            if pa.types.is_integer(col.type):
                vals[j] = rnd.choice([-1, -2**31, 2**31 - 1, 2**62, -2**63, 10**9, n + 5, None])
            elif pa.types.is_floating(col.type):
                vals[j] = rnd.choice([float("nan"), float("inf"), -1e300, None])
            else:
                vals[j] = None if rnd.random() < 0.3 else rnd.choice(STRINGS)
                if pa.types.is_binary(col.type) and vals[j] is not None:
                    vals[j] = vals[j].encode()
        try:
            new = pa.array(vals, col.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            new = pa.array(vals)  # the hostile value changes the type
    elif op < 0.6:
        new = col.cast(pa.string()) if not pa.types.is_string(col.type) else pa.array(
            [rnd.randrange(1000) for _ in range(n)], pa.int64())
    elif op < 0.8:
        keep = rnd.randrange(n + 1) if n else 0
        cut = table.slice(0, keep)
        return cut.append_column("extra", pa.array(range(keep), pa.int32())) if rnd.random() < 0.3 else cut
    else:
        return table.remove_column(i)
    return table.set_column(i, table.column_names[i], new)


def _ipc_file(table: Any, rnd: random.Random) -> bytes:
    import pyarrow.ipc as ipc

    sink = io.BytesIO()
    opts = ipc.IpcWriteOptions(compression=rnd.choice(["zstd", None, "lz4"]))
    with ipc.new_file(sink, table.schema, options=opts) as w:
        w.write_table(table)
    return sink.getvalue()


_FRAME_MAGICS = (b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18")  # zstd, LZ4 frame


def declared_length_mutate(data: bytes, rnd: random.Random) -> bytes:
    """One compressed Arrow buffer's declared uncompressed length (the int64 before its
    zstd or LZ4 frame) changed: what pyarrow allocates before it inflates."""
    at = [i - 8 for m in _FRAME_MAGICS for i in _find_all(data, m) if i >= 8]
    if not at:
        return data
    i = rnd.choice(at)
    (n,) = struct.unpack_from("<q", data, i)
    v = rnd.choice([2**62, 2**40, 2**31, 1 << 30, 64 << 20, len(data) * 1000, n + 1, n - 1, n * 2, 0, -2, -1])
    return data[:i] + struct.pack("<q", v) + data[i + 8:]


def _find_all(data: bytes, needle: bytes, limit: int = 64) -> list[int]:
    out, i = [], data.find(needle)
    while i >= 0 and len(out) < limit:
        out.append(i)
        i = data.find(needle, i + 1)
    return out


def native(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    if rnd.random() < 0.2:  # damage as a disk would: CRCs no longer match
        return byte_mutate(data, rnd, 0, others)
    zin = zipfile.ZipFile(io.BytesIO(data))
    members = {n: zin.read(n) for n in zin.namelist()}
    name = rnd.choice(list(members))
    body = members[name]
    op = rnd.random()
    if name == "header.json":
        if op < 0.8:
            doc = json.loads(body)
            for _ in range(rnd.choice([1, 2, 3])):
                nodes = _nodes(doc)
                c, k = rnd.choice(nodes)
                if rnd.random() < 0.8:
                    c[k] = hostile_value(rnd)
                elif isinstance(c, dict):
                    del c[k]
            body = json_text(doc, rnd)
        else:
            body = byte_mutate(body, rnd, 0)
    elif op < 0.45:  # Arrow bytes damaged under a valid CRC
        body = byte_mutate(body, rnd, 0, [m for m in members.values()])
    elif op < 0.9:
        table = ipc.open_file(pa.BufferReader(body)).read_all()
        table.validate(full=True)  # a damaged input (a stacked round) would crash pyarrow below, not raise
        if rnd.random() < 0.25:  # the values as they were; a compressed buffer's declared length changed
            body = declared_length_mutate(_ipc_file(table, rnd), rnd)
        else:
            body = _ipc_file(arrow_mutate_table(table, rnd), rnd)
    else:
        del members[name]
        body = b""
        if rnd.random() < 0.5:
            members[rnd.choice(["stats/999.arrow", "../evil", "events.arrow"])] = bytes(8)
    if body:
        members[name] = body
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=rnd.choice([zipfile.ZIP_STORED, zipfile.ZIP_STORED,
                                                           zipfile.ZIP_DEFLATED])) as z:
        for n, b in members.items():
            z.writestr(zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0)), b, compress_type=z.compression)
    return out.getvalue()


# --------------------------------------------------------------------------- journal
def journal(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    magic = b"POLYPROF-JOURNAL 1\n"
    op = rnd.random()
    if op < 0.45:
        return byte_mutate(data, rnd, len(magic) if rnd.random() < 0.9 else 0, others)
    if op < 0.55:
        return data[:rnd.randrange(len(magic), len(data))]  # killed mid-write
    reader = ipc.open_stream(pa.BufferReader(data[len(magic):]))
    schema = reader.schema
    batches = list(reader)
    for b in batches:  # a damaged input (a stacked round) would crash pyarrow below, not raise
        b.validate(full=True)
    meta = dict(schema.metadata or {})
    if op < 0.7:
        try:
            doc = json.loads(meta.get(b"polyprof", b"{}"))
            nodes = _nodes(doc)
            if nodes and rnd.random() < 0.8:
                c, k = rnd.choice(nodes)
                c[k] = hostile_value(rnd)
            else:
                doc = hostile_value(rnd)
            meta[b"polyprof"] = json_text(doc, rnd)
        except ValueError:
            meta[b"polyprof"] = b"{"
        schema = schema.with_metadata(meta)
        batches = [b.replace_schema_metadata(meta) for b in batches]
    else:
        i = rnd.randrange(len(batches))
        t = arrow_mutate_table(pa.Table.from_batches([batches[i]]), rnd)
        if t.schema.equals(schema, check_metadata=False):
            batches[i:i + 1] = [b.replace_schema_metadata(meta) for b in t.to_batches()]
        else:  # a journal written with another schema
            schema = t.schema.with_metadata(meta)
            batches = [b.replace_schema_metadata(meta) for b in t.to_batches()]
    sink = io.BytesIO()
    compression = rnd.choice([None, None, "zstd", "lz4"])  # the journal writes none; a reader takes any
    with ipc.new_stream(sink, schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        for b in batches:
            w.write_batch(b)
    out = magic + sink.getvalue()
    return declared_length_mutate(out, rnd) if compression and rnd.random() < 0.3 else out


from .more_mutators import MORE  # noqa: E402 - it uses byte_mutate and the JSON helpers from here
from .sqlite_mutators import sqlite  # noqa: E402 - it uses byte_mutate from here

MUTATORS: dict[str, Callable[[bytes, random.Random, list[bytes]], bytes]] = {
    "kineto": kineto, "xspace": xspace, "native": native, "journal": journal, "nsys": sqlite, "rocpd": sqlite, "rpd": sqlite,
    "vendor_json": kineto, **MORE,
}


def mutate(reader: str, seeds: list[tuple[str, bytes]], seed: int, index: int) -> tuple[str, bytes]:
    """The ``index``-th input of a run with ``seed``: (file name of the seed it came from, bytes)."""
    rnd = random.Random(f"{reader}:{seed}:{index}")
    name, data = seeds[rnd.randrange(len(seeds))]
    others = [d for _, d in seeds]
    try:
        out = MUTATORS[reader](data, rnd, others)
    except Exception:  # noqa: BLE001 - a mutator's own limit (e.g. a value Arrow cannot hold): bytes instead
        out = byte_mutate(data, rnd, 0, others)
    if rnd.random() < 0.1:  # stack a second round now and then
        try:
            out = MUTATORS[reader](out, rnd, others)
        except Exception:  # the first round made something the structured mutator cannot parse
            out = byte_mutate(out, rnd, 0, others)
    return name, out
