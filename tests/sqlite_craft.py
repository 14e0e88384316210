"""Small SQLite files written byte by byte (https://sqlite.org/fileformat2.html), for
tests that need records SQLite itself would never write: serial types and sizes out of
range, cells past their page. One table ``t`` on page 2, its rows given as records."""

from __future__ import annotations

import struct
from pathlib import Path


def varint(v: int) -> bytes:
    """SQLite's varint of ``v`` (0 <= v < 2**64): big-endian 7-bit groups, the ninth byte whole."""
    if v > 0x00FFFFFFFFFFFFFF:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(out))


def record(types: list[int], body: bytes) -> bytes:
    """A record: its header (size, serial types) and ``body`` as given (not checked)."""
    head = b"".join(varint(t) for t in types)
    n = len(head) + 1
    if len(varint(n + 1)) > 1:
        n += len(varint(n + 1)) - 1
    return varint(n) + head + body


def text_record(values: list[object]) -> bytes:
    types, body = [], b""
    for v in values:
        if isinstance(v, int):
            types.append(6)
            body += struct.pack(">q", v)
        else:
            b = str(v).encode()
            types.append(2 * len(b) + 13)
            body += b
    return record(types, body)


def _leaf(cells: list[bytes], page_size: int, offset: int) -> bytes:
    """A table leaf page (0x0D) of ``cells``, its header at ``offset`` (100 on page 1)."""
    content, ptrs = page_size, []
    for c in cells:
        content -= len(c)
        ptrs.append(content)
    head = struct.pack(">BHHHB", 0x0D, 0, len(cells), content % 65536, 0) + b"".join(struct.pack(">H", p) for p in ptrs)
    page = bytearray(page_size)
    page[offset:offset + len(head)] = head
    for c, p in zip(cells, ptrs):
        page[p:p + len(c)] = c
    return bytes(page)


def cell(rowid: int, rec: bytes) -> bytes:
    """A table leaf cell holding all of ``rec``."""
    return varint(len(rec)) + varint(rowid) + rec


def spilled(rowid: int, rec: bytes, page_size: int, first: int) -> tuple[bytes, list[bytes]]:
    """A cell whose record spills onto overflow pages ``first, first + 1, ...`` (the
    file format's split of a payload), and those pages."""
    u = page_size
    m = (u - 12) * 32 // 255 - 23
    k = m + (len(rec) - m) % (u - 4)
    local = k if k <= u - 35 else m
    rest = rec[local:]
    chunks = [rest[i:i + u - 4] for i in range(0, len(rest), u - 4)]
    pages = [struct.pack(">I", first + i + 1 if i + 1 < len(chunks) else 0) + c for i, c in enumerate(chunks)]
    return varint(len(rec)) + varint(rowid) + rec[:local] + struct.pack(">I", first), pages


def write(path: Path, rows: list[bytes], columns: str = "a, b, c", page_size: int = 1024,
          extra_pages: list[bytes] = (), cells: list[bytes] | None = None) -> Path:
    """A database with table ``t(columns)`` whose page 2 holds ``rows`` (records, rowids
    1, 2, ...), or the ``cells`` as given; ``extra_pages`` follow as pages 3, 4, ..."""
    sql = f"CREATE TABLE t({columns})".encode()  # rootpage 2 as a 1-byte integer, as SQLite writes it
    schema = record([2 * 5 + 13, 2 + 13, 2 + 13, 1, 2 * len(sql) + 13], b"table" + b"t" + b"t" + b"\x02" + sql)
    npages = 2 + len(extra_pages)
    page1 = bytearray(_leaf([cell(1, schema)], page_size, 100))
    page1[:100] = (b"SQLite format 3\x00" + struct.pack(">H", page_size if page_size < 65536 else 1)
                   + bytes([1, 1, 0, 64, 32, 32]) + struct.pack(">IIIIIIIIIIII", 1, npages, 0, 0, 1, 4, 0, 0, 1, 0, 0, 0)
                   + bytes(20) + struct.pack(">II", 1, 3045000))
    page2 = _leaf(cells if cells is not None else [cell(i + 1, r) for i, r in enumerate(rows)], page_size, 0)
    path.write_bytes(bytes(page1) + page2 + b"".join(p.ljust(page_size, b"\x00") for p in extra_pages))
    return path
