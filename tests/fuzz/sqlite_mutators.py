"""SQLite inputs for the fuzzers: seeds built from the real Nsight Systems export, the
real RPD database (tests/data/rpd) and the rocpd databases tests/test_rocprof.py builds,
and a mutator that damages them where a
page walk (formats/_sqlite_pages.c) has to trust the file: page headers, cell pointers,
varints, record headers and serial types, overflow chains, child pointers, the database
header (page size, reserved bytes, page count, freelist), and the schema's root pages.

Seeds are made once per process (deterministic, in a temporary directory): the nsys
export as it is, and copies with more rows (interior pages), long texts (overflow
chains), at page sizes from 512 to 65536.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import struct
import tempfile
from pathlib import Path

from sqlite_craft import varint  # tests/ is on the path (pytest, scripts/fuzz*.py)

ROOT = Path(__file__).resolve().parents[2]
NSYS = ROOT / "tests" / "data" / "nsys" / "saxpy_2022.sqlite"
RPD = ROOT / "tests" / "data" / "rpd" / "matmul_result.rpd"

_CACHE: dict[str, list[tuple[str, bytes]]] = {}


def _vacuum(src: Path, dst: Path, page_size: int, grow: int, long_texts: int) -> bytes:
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%'")]
        for t in tables:  # more rows: tables of several levels
            n = conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            if 0 < n < 2000 and grow:
                cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")') if not r[5]]
                if cols:
                    c = ", ".join(f'"{x}"' for x in cols)
                    for _ in range(grow):
                        conn.execute(f'INSERT INTO "{t}" ({c}) SELECT {c} FROM "{t}" LIMIT 400')
        if long_texts and "StringIds" in tables:  # overflow chains in a text table
            base = conn.execute("SELECT max(id) FROM StringIds").fetchone()[0] or 0
            conn.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                             [(base + 1 + i, f"long{i}-" + "x" * (700 * (i + 1))) for i in range(long_texts)])
        conn.commit()
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return dst.read_bytes()


def build_seeds(reader: str) -> list[tuple[str, bytes]]:
    """(name, bytes) of the SQLite seeds of ``reader`` ("nsys", "rocpd" or "rpd")."""
    if reader in _CACHE:
        return _CACHE[reader]
    out: list[tuple[str, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="polyprof-sqlite-seeds-") as tmp:
        d = Path(tmp)
        if reader == "nsys":
            out.append(("saxpy_2022.sqlite", NSYS.read_bytes()))
            for ps, grow, texts in ((512, 2, 3), (4096, 3, 4), (65536, 1, 2)):
                out.append((f"saxpy_p{ps}.sqlite", _vacuum(NSYS, d / f"n{ps}.sqlite", ps, grow, texts)))
        elif reader == "rpd":
            for ps in (512, 4096):
                out.append((f"matmul_p{ps}.rpd", _vacuum(RPD, d / f"m{ps}.rpd", ps, 0, 0)))
        else:
            import test_rocprof

            for version in (3, 4):
                src = test_rocprof.build_rocpd(d / f"r{version}.db", version)
                for ps in (512, 4096):
                    out.append((f"rocpd{version}_p{ps}.db", _vacuum(src, d / f"r{version}_{ps}.db", ps, 0, 0)))
    _CACHE[reader] = out
    return out


# --------------------------------------------------------------------------- pages
def _varint(b: bytes | bytearray, i: int) -> tuple[int, int]:
    v = 0
    for k in range(8):
        if i + k >= len(b):
            return v, k
        v = (v << 7) | (b[i + k] & 0x7F)
        if not b[i + k] & 0x80:
            return v, k + 1
    return (v << 8) | (b[i + 8] if i + 8 < len(b) else 0), 9


def _layout(b: bytes | bytearray) -> tuple[int, int, list[tuple[int, int]]]:
    """(page size, usable size, [(page start, header offset)] of the table b-tree pages)."""
    ps = int.from_bytes(b[16:18], "big")
    ps = 65536 if ps == 1 else ps
    if ps < 512 or ps & (ps - 1):
        return 0, 0, []
    usable = ps - b[20]
    pages = []
    for start in range(0, len(b) - ps + 1, ps):
        h = start + (100 if start == 0 else 0)
        if b[h] in (0x05, 0x0D):
            pages.append((start, h))
    return ps, usable, pages


def _cells(b: bytearray, h: int) -> list[int]:
    """Offsets (in the file) of the cell-pointer slots of the page whose header is at h."""
    n = int.from_bytes(b[h + 3:h + 5], "big")
    first = h + (12 if b[h] == 0x05 else 8)
    return [first + 2 * i for i in range(min(n, 4096))]


HUGE_VARINT = b"\xff" * 9
VARINTS = [HUGE_VARINT, b"\x80" * 8 + b"\x01", b"\x81\x80\x80\x80\x00", b"\xff\xff\xff\x7f", b"\x87\xff\xff\xff\x7f",
           b"\x00", b"\x07", b"\x0a", b"\x0b", b"\x81\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f"]


def _page_op(b: bytearray, rnd: random.Random, ps: int, usable: int, pages: list[tuple[int, int]]) -> None:
    start, h = rnd.choice(pages)
    npages = len(b) // ps
    slots = _cells(b, h)
    op = rnd.random()
    if op < 0.12:  # page header: type, cell count, content start
        f = rnd.choice([0, 1, 3, 5, 7])
        if f == 0:
            b[h] = rnd.choice([0x00, 0x02, 0x05, 0x0A, 0x0D, 0xFF])
        elif f == 7 and b[h] == 0x05:
            b[h + 8:h + 12] = struct.pack(">I", rnd.choice([0, 1, start // ps + 1, npages, npages + 1, 2**32 - 1]))
        else:
            b[h + f:h + f + 2] = struct.pack(">H", rnd.choice([0, 1, 0xFFFF, usable // 2, usable, len(slots) + 1]) & 0xFFFF)
    elif op < 0.3 and slots:  # a cell pointer
        s = rnd.choice(slots)
        v = rnd.choice([0, 1, h - start, usable - 1, usable - 2, usable - 4, usable, ps - 1, 0xFFFF,
                        int.from_bytes(b[rnd.choice(slots):][:2], "big"), rnd.randrange(0x10000)])
        b[s:s + 2] = struct.pack(">H", v & 0xFFFF)
    elif slots:  # inside a cell
        cell = start + int.from_bytes(b[rnd.choice(slots):][:2], "big")
        if not start <= cell < start + usable:
            return
        if b[h] == 0x05:  # interior: the child pointer
            b[cell:cell + 4] = struct.pack(">I", rnd.choice([0, 1, start // ps + 1, npages, npages + 1, 2**31,
                                                             rnd.randrange(1, npages + 1)]))
            return
        size, k1 = _varint(b, cell)
        _, k2 = _varint(b, cell + k1)
        rec = cell + k1 + k2
        r = rnd.random()
        if r < 0.25:  # the payload size or the rowid varint
            at = cell if rnd.random() < 0.6 else cell + k1
            v = rnd.choice(VARINTS + [varint(size + rnd.choice([1, 7, 100, usable, 10**6, 2**31]))])
            b[at:at + len(v)] = v
        elif r < 0.5:  # the record header's size
            v = rnd.choice(VARINTS)
            b[rec:rec + len(v)] = v
        elif r < 0.85:  # a serial type
            hsize, k = _varint(b, rec)
            if hsize > k:
                at = rec + k + rnd.randrange(max(1, min(hsize - k, 40)))
                v = rnd.choice(VARINTS + [varint(t) for t in (7, 8, 9, 10, 11, 12, 13, 2**31 + 13, 2**62, 2**63 + 1)])
                b[at:at + len(v)] = v
        else:  # the overflow pointer, where the payload spills
            x = usable - 35
            if size > x:
                m = ((usable - 12) * 32 // 255) - 23
                kk = m + (size - m) % (usable - 4)
                local = kk if kk <= x else m
                at = rec + local
                b[at:at + 4] = struct.pack(">I", rnd.choice([0, 1, start // ps + 1, npages, npages + 1, 2**32 - 1,
                                                             rnd.randrange(1, npages + 1)]))


def _header_op(b: bytearray, rnd: random.Random) -> None:
    f = rnd.random()
    if f < 0.35:  # page size
        b[16:18] = struct.pack(">H", rnd.choice([1, 512, 1024, 2048, 4096, 8192, 16384, 32768, 0, 3, 1000, 0xFFFF]))
    elif f < 0.5:  # reserved bytes
        b[20] = rnd.choice([0, 1, 32, 64, 255])
    elif f < 0.7:  # page count (valid by the change counter, or not)
        b[28:32] = struct.pack(">I", rnd.choice([0, 1, 2, len(b) // 512 + 1, 2**31, 2**32 - 1]))
        if rnd.random() < 0.5:
            b[92:96] = b[24:28]
    elif f < 0.9:  # freelist trunk and count
        b[32:40] = struct.pack(">II", rnd.choice([0, 1, 2, 3, 2**31]), rnd.choice([0, 1, 1000, 2**32 - 1]))
    else:  # text encoding, schema format
        at = rnd.choice([56, 44])
        b[at:at + 4] = struct.pack(">I", rnd.choice([0, 1, 2, 3, 4, 99]))


def _sql_op(data: bytes, rnd: random.Random) -> bytes:
    """A well-formed database with odd content: values of other types, huge row ids,
    root pages swapped in the schema (through SQLite itself)."""
    with tempfile.TemporaryDirectory(prefix="polyprof-sqlmut-") as tmp:
        p = Path(tmp) / "m.sqlite"
        p.write_bytes(data)
        conn = sqlite3.connect(p)
        try:
            tables = [r for r in conn.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table' "
                                              "AND name NOT LIKE 'sqlite_%'")]
            t, root = rnd.choice(tables)
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            op = rnd.random()
            if op < 0.45 and cols:
                c = rnd.choice(cols)
                v = rnd.choice(["'text'", "1.5", "x'00ff'", "NULL", "9223372036854775807", "-9223372036854775808",
                                "1e300", "''", "'" + "y" * 5000 + "'", "-1", "0"])
                conn.execute(f'UPDATE "{t}" SET "{c}" = {v} WHERE rowid IN (SELECT rowid FROM "{t}" '
                             f'ORDER BY random() LIMIT {rnd.choice([1, 3, 1000])})')
            elif op < 0.6:
                conn.execute(f'UPDATE "{t}" SET rowid = rowid + {rnd.choice([2**62, 2**40, -2**40])} '
                             f'WHERE rowid = (SELECT max(rowid) FROM "{t}")')
            elif op < 0.75 and cols:
                conn.execute(f'ALTER TABLE "{t}" ADD COLUMN "extra{rnd.randrange(9)}" INTEGER')
            else:
                other = rnd.choice([r[1] for r in tables] + [1, 2, 10**6, 0, -1])
                conn.execute("PRAGMA writable_schema = ON")
                conn.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = ?", (other, t))
            conn.commit()
        except sqlite3.Error:
            pass
        finally:
            conn.close()
        return p.read_bytes()


def sqlite(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    """A damaged copy of an SQLite database (deterministic in ``rnd``)."""
    from .mutators import byte_mutate

    op = rnd.random()
    if op < 0.15:
        return _sql_op(data, rnd)
    if op < 0.22:  # cut short: at a page boundary or inside a page
        ps = int.from_bytes(data[16:18], "big") or 1024
        ps = 65536 if ps == 1 else ps
        cut = rnd.randrange(100, len(data))
        return data[:cut - cut % ps if rnd.random() < 0.5 and cut > ps else cut]
    b = bytearray(data)
    ps, usable, pages = _layout(b)
    if op < 0.3 or not pages:
        _header_op(b, rnd)
        return bytes(b)
    if op < 0.4:
        return byte_mutate(data, rnd, 100, others)
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        _page_op(b, rnd, ps, usable, pages)
    return bytes(b)
