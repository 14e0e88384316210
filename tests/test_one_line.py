"""polyprof.errors.one_line: how a polyprof message quotes another exception (pyarrow's,
DuckDB's, sqlite3's, an OSError, protobuf's): on one line, cut to a length, and never
failing itself; and the places that quote with it. (And the one family of the
corrections in analyze/ranktest.py, folded from two copies in the same change.)"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from polyprof import entrypoints
from polyprof.analyze.ranktest import benjamini_hochberg, holm
from polyprof.errors import TraceFormatError, one_line
from polyprof.formats import safety
from polyprof.formats.sqlite_db import failure


class Unprintable(Exception):
    """A vendor's exception whose message itself fails."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ failed")


def test_white_space_and_newlines_fold_to_single_spaces() -> None:
    assert one_line(ValueError("first line\n  second\tline\r\n\n third  ")) == "first line second line third"
    assert one_line("  already text \n") == "already text"
    assert one_line(ValueError()) == ""
    assert one_line(KeyError("k")) == "'k'"  # str() of the exception, as Python prints it


def test_long_messages_are_cut_to_n_characters_with_the_dots_counted() -> None:
    text = "".join(f"word{i} " for i in range(500))  # 3,890 characters
    short = one_line(RuntimeError(text))
    assert len(short) == 200 and short.endswith("...") and short[:197] == text[:197]
    assert len(one_line(text, 120)) == 120 and one_line(text, 120) == text[:117] + "..."
    assert one_line(text, None) == text.strip()  # None: never cut
    assert one_line("x" * 200) == "x" * 200  # exactly n: whole, no dots
    assert one_line("x" * 201) == "x" * 197 + "..."
    assert one_line("abcdef", 2) == "..."  # too small a limit still says it was cut
    folded = one_line(ValueError("a\n" * 150))  # 300 characters once folded: the cut is after folding
    assert folded == ("a " * 98 + "a...")[:200] and len(folded) == 200 and "\n" not in folded


def test_an_exception_whose_message_fails_is_still_named() -> None:
    assert one_line(Unprintable()) == "<Unprintable whose message cannot be shown>"


def test_real_pyarrow_errors() -> None:
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(pa.ArrowInvalid) as e:
        pa.Table.from_batches([pa.record_batch({"a": [1]}), pa.record_batch({"a": ["x"]})])
    assert "\n" in str(e.value)  # pyarrow prints both schemas, a line a field
    said = one_line(e.value)
    assert "\n" not in said and said.startswith("Schema at index 1 was different:") and "a: int64" in said
    pq = pytest.importorskip("pyarrow.parquet")
    with pytest.raises(pa.ArrowException) as e2:
        pq.ParquetFile(pa.BufferReader(b"not parquet" * 40))
    assert "magic bytes" in one_line(e2.value, None)
    assert len(one_line(e2.value, 40)) == 40


def test_real_duckdb_errors() -> None:
    duckdb = pytest.importorskip("duckdb")
    with duckdb.connect() as con, pytest.raises(duckdb.Error) as e:
        con.sql("select nope from range(3)")
    assert "\n" in str(e.value)  # DuckDB's candidates (and the query line) come on lines of their own
    said = one_line(e.value)
    assert "\n" not in said and said.startswith('Binder Error: Referenced column "nope" not found') and "range" in said


def test_real_sqlite3_errors() -> None:
    with pytest.raises(sqlite3.OperationalError) as e:
        sqlite3.connect(":memory:").execute("select [col\nwith a newline]")
    assert one_line(e.value) == "no such column: col with a newline"
    # the reader's message for it is one line too
    got = failure("t.sqlite", e.value)
    assert isinstance(got, TraceFormatError)
    assert got.problem == "SQLite error while reading (OperationalError: no such column: col with a newline)"


def test_real_os_and_protobuf_errors(tmp_path: Path) -> None:
    with pytest.raises(OSError) as e:
        (tmp_path / "missing\nname").read_bytes()
    assert one_line(e.value).startswith("[Errno 2] No such file or directory:") and "\n" not in one_line(e.value)
    pytest.importorskip("google.protobuf")
    from polyprof.formats import xplane_pb2

    from google.protobuf.message import DecodeError
    with pytest.raises(DecodeError) as e2:
        xplane_pb2.XSpace.FromString(b"\x0a\xff\xff\xff\xff\x0f")
    assert one_line(e2.value).startswith("Error parsing message")


def test_a_reader_failing_with_an_unprintable_exception_is_still_a_trace_format_error() -> None:
    """safety.reading turns whatever a reader raises into a TraceFormatError naming the
    file; an exception whose __str__ fails made the message itself raise (RuntimeError)."""
    with pytest.raises(TraceFormatError) as e, safety.reading("t.bin"):
        raise Unprintable()
    assert e.value.problem == "damaged or unsupported content (Unprintable: <Unprintable whose message cannot be shown>)"
    with pytest.raises(TraceFormatError) as e2, safety.reading("t.bin"):
        raise ValueError("x\n" * 300)
    assert len(e2.value.problem) == len("damaged or unsupported content (ValueError: )") + 200


def test_a_vendor_entry_point_raising_an_unprintable_exception_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vendor's module that raises on import is skipped with a reason, never raised:
    also when its exception's message cannot be made."""
    (tmp_path / "acme_unprintable.py").write_text(
        "class Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n\nraise Weird()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_unprintable", raising=False)
    why = entrypoints._why_not(entrypoints.EntryPoint("acme", "acme_unprintable:X", "acme"), lambda obj, ep: obj)
    assert why == "cannot import it (Weird: <Weird whose message cannot be shown>)"
    (tmp_path / "acme_long.py").write_text("raise ImportError('needs\\n' + 'libacme ' * 100)\n")
    why = entrypoints._why_not(entrypoints.EntryPoint("acme", "acme_long:X", "acme"), lambda obj, ep: obj)
    assert isinstance(why, str) and why.startswith("cannot import it (ImportError: needs libacme libacme")
    assert len(why) == len("cannot import it (ImportError: )") + 200 and why.endswith("...)")


def test_holm_and_benjamini_hochberg_share_one_family_and_keep_their_values() -> None:
    """analyze/ranktest.py's two corrections read the family (the non-NaN p-values, from
    the smallest up) the same way (one _family since); hand-worked values: Holm multiplies
    the i-th smallest of m by m - i and keeps it monotone, BH by m / rank from the top."""
    p = np.array([0.01, np.nan, 0.04, 0.03, 0.5])
    assert np.allclose(holm(p), [0.04, np.nan, 0.09, 0.09, 0.5], equal_nan=True)
    assert np.allclose(benjamini_hochberg(p), [0.04, np.nan, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5], equal_nan=True)
    assert np.allclose(holm(np.array([0.3, 0.3])), [0.6, 0.6]) and np.allclose(benjamini_hochberg(np.array([0.3, 0.3])), [0.3, 0.3])
    for f in (holm, benjamini_hochberg):
        assert np.isnan(f(np.array([np.nan, np.nan]))).all() and f(np.array([])).shape == (0,)
