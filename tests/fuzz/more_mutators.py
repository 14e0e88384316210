"""Mutators of the readers added after the first ones (seeds.READERS, seeds._more_seeds):
CSV tables (rocprofv3, rocprof v1, nsys stats: cells of the wrong type or range, columns
dropped, renamed or swapped, rows cut, quotes unbalanced, sections of nsys stats's
printed output damaged), JSON documents that are not Chrome's (rocprofv3's results.json,
torch's memory timeline: any node of the tree), Perfetto protobuf (tests/fuzz/native.py's
packet and varint edits) and Parquet (the table's values and types, or its bytes).

Deterministic in the ``random.Random`` given, as mutators.py.
"""

from __future__ import annotations

import csv
import io
import json
import random
from typing import Any

from .mutators import (
    HUGE_INTS,
    STRINGS,
    _nodes,
    arrow_mutate_table,
    byte_mutate,
    deep_nest,
    hostile_value,
    json_text,
)

CELLS = [str(v) for v in HUGE_INTS] + STRINGS + ["1.5", "-1.5", "1e19", "0x10", " 12", "12 ", "", "\"", "a,b",
                                                 "line\nbreak", "\r", "NULL", "None", "-0", "9" * 400]


def _rows(text: str) -> list[list[str]] | None:
    try:
        return list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:
        return None


def _csv_text(rows: list[list[str]], rnd: random.Random) -> str:
    out = io.StringIO()
    csv.writer(out, quoting=rnd.choice([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC])
               if rnd.random() < 0.3 else csv.QUOTE_MINIMAL, lineterminator=rnd.choice(["\n", "\n", "\r\n"])
               ).writerows(rows)
    return out.getvalue()


def csv_rows_mutate(rows: list[list[str]], rnd: random.Random) -> None:
    """Edits to a CSV's rows (the first row: the header), in place."""
    for _ in range(rnd.choice([1, 1, 2, 3, 5])):
        if not rows:
            rows.append([rnd.choice(CELLS)])
        op = rnd.random()
        r = rnd.randrange(len(rows))
        row = rows[r]
        if op < 0.45 and row:  # a cell
            row[rnd.randrange(len(row))] = rnd.choice(CELLS)
        elif op < 0.55 and rows[0]:  # a header name
            h = rows[0]
            i = rnd.randrange(len(h))
            h[i] = rnd.choice([h[rnd.randrange(len(h))], "", h[i].upper(), h[i] + " ", rnd.choice(CELLS)])
        elif op < 0.63 and rows[0]:  # a column gone from every row
            i = rnd.randrange(len(rows[0]))
            for x in rows:
                del x[i:i + 1]
        elif op < 0.7 and len(rows[0]) > 1:  # two columns swapped in the header only
            i, j = rnd.sample(range(len(rows[0])), 2)
            rows[0][i], rows[0][j] = rows[0][j], rows[0][i]
        elif op < 0.77 and row:  # a row cut short or made longer
            if rnd.random() < 0.5:
                del row[rnd.randrange(len(row)):]
            else:
                row.extend(rnd.choice(CELLS) for _ in range(rnd.randint(1, 4)))
        elif op < 0.83:  # rows duplicated, or dropped from some place on
            if rnd.random() < 0.5:
                rows.insert(rnd.randrange(len(rows) + 1), list(row) * rnd.choice([1, 1, 2]))
            else:
                del rows[rnd.randrange(len(rows)):]
        elif op < 0.9 and len(rows) > 2:  # a column's values swapped between two rows
            a, b = rnd.randrange(1, len(rows)), rnd.randrange(1, len(rows))
            i = rnd.randrange(max(1, min(len(rows[a]), len(rows[b]))))
            if i < len(rows[a]) and i < len(rows[b]):
                rows[a][i], rows[b][i] = rows[b][i], rows[a][i]
        elif row:  # a whole column of one value
            i = rnd.randrange(len(row))
            v = rnd.choice(CELLS)
            for x in rows[1:]:
                if i < len(x):
                    x[i] = v


def csv_table(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    """A CSV file (or nsys stats's printed output: a CSV of lines) damaged."""
    op = rnd.random()
    if op < 0.25:
        return byte_mutate(data, rnd, 0, others)
    text = data.decode("utf-8", "replace")
    if op < 0.35:  # text-level: an unbalanced quote, a cut mid-row, a BOM, blank lines
        i = rnd.randrange(len(text) + 1)
        return (text[:i] + rnd.choice(['"', '""', "\n\n", "\ufeff", "\x00", ",,,", "\r", "\n" + text[:i]]) +
                text[i:] if rnd.random() < 0.7 else text[:i]).encode("utf-8", "surrogatepass")
    if "Processing [" in text and rnd.random() < 0.5:  # nsys stats output: one section's table
        blocks = text.split("\n\n")
        i = rnd.randrange(len(blocks))
        rows = _rows(blocks[i])
        if rows is not None:
            csv_rows_mutate(rows, rnd)
            blocks[i] = _csv_text(rows, rnd).rstrip("\r\n")
        elif rnd.random() < 0.5:
            del blocks[i]
        return "\n\n".join(blocks).encode()
    rows = _rows(text)
    if rows is None:
        return byte_mutate(data, rnd, 0, others)
    csv_rows_mutate(rows, rnd)
    return _csv_text(rows, rnd).encode("utf-8", "surrogatepass")


def json_doc_mutate(doc: Any, rnd: random.Random) -> Any:
    """Edits anywhere in a JSON tree (rocprofv3's results.json, torch's memory timeline)."""
    for _ in range(rnd.choice([1, 1, 2, 3, 5])):
        nodes = _nodes(doc)
        if not nodes:
            return hostile_value(rnd)
        c, k = rnd.choice(nodes)
        op = rnd.random()
        if op < 0.55:
            c[k] = hostile_value(rnd)
        elif op < 0.7:
            if isinstance(c, dict):
                del c[k]
            else:
                c.pop(k)
        elif op < 0.78:
            c[k] = deep_nest(rnd)
        elif op < 0.88 and isinstance(c[k], list) and c[k]:  # a list cut, or an item repeated
            if rnd.random() < 0.5:
                del c[k][rnd.randrange(len(c[k])):]
            else:
                c[k].insert(rnd.randrange(len(c[k]) + 1), json.loads(json.dumps(rnd.choice(c[k]))))
        elif isinstance(c[k], (int, float)) and not isinstance(c[k], bool):
            c[k] = rnd.choice([-c[k], c[k] * 1000, c[k] + 1, float(c[k]), str(c[k])])
        else:
            c[k] = rnd.choice(HUGE_INTS)
    return doc


def json_tree(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    r = rnd.random()
    if r < 0.2:
        from .json_mutators import json_bytes

        return json_bytes(data, rnd)
    if r < 0.85:
        try:
            return json_text(json_doc_mutate(json.loads(data), rnd), rnd)
        except (ValueError, RecursionError):
            pass
    return byte_mutate(data, rnd, 0, others)


def perfetto(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    from .native import EDITS

    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        data = rnd.choice(EDITS["perfetto"])(data, rnd)
    return data


def parquet(data: bytes, rnd: random.Random, others: list[bytes]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if rnd.random() < 0.35:
        return byte_mutate(data, rnd, 0, others)
    table = pq.read_table(pa.BufferReader(data))
    table.validate(full=True)  # a damaged input (a stacked round): pyarrow would crash writing it, not raise
    meta = table.schema.metadata or {}
    if meta and rnd.random() < 0.3:  # the polyprof header kept in the schema's metadata
        key = rnd.choice(list(meta))
        try:
            doc = json_doc_mutate(json.loads(meta[key]), rnd)
            meta = {**meta, key: json_text(doc, rnd)}
        except ValueError:
            meta = {**meta, key: b"{"}
        table = table.replace_schema_metadata(meta)
    else:
        table = arrow_mutate_table(table, rnd).replace_schema_metadata(meta)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=rnd.choice(["zstd", "snappy", "none"]))
    return sink.getvalue()


MORE = {"perfetto": perfetto, "rocprof_json": json_tree, "rocprof_csv": csv_table, "rocprof_v1_csv": csv_table,
        "nsys_csv": csv_table, "memory_timeline": json_tree, "parquet": parquet}
