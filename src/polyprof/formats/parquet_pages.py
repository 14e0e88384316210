"""Parquet files as polyprof writes and reads them: each page with a CRC-32 of its bytes,
checked whenever a page is read.

Without them, a flipped byte inside a compressed column chunk can still decompress
and decode: a store's ``start_ns`` read back with wrong numbers and no error (an audit
flipped 28 bytes of one; its summary changed, exit 0). Every Parquet file polyprof
writes (a store's files, ``export -f parquet``) goes through :func:`write_table` or
:func:`writer`, every one it reads with pyarrow through :func:`open_file`; a page whose
checksum does not match raises ``OSError`` ("could not verify page integrity, CRC
checksum verification failed ..."), which the readers report as a damaged file. Files
written before (no checksums) read as before: a page without a checksum is not
checked. DuckDB does not check them (docs/store.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def open_file(path: str | Path) -> pq.ParquetFile:
    """``path`` opened for reading, its pages' checksums checked as they are read."""
    return pq.ParquetFile(path, page_checksum_verification=True)


def writer(path: str | Path, schema: pa.Schema, **options: Any) -> pq.ParquetWriter:
    """A ``pq.ParquetWriter`` that writes each page's checksum."""
    return pq.ParquetWriter(path, schema, write_page_checksum=True, **options)


def write_table(table: pa.Table, path: str | Path, **options: Any) -> None:
    """``pq.write_table`` with each page's checksum."""
    pq.write_table(table, path, write_page_checksum=True, **options)
