"""One DuckDB statement, bounded: its result read in record batches as they are computed
(a cross join is never held whole), stopped after ``timeout_s`` (``con.interrupt`` from
a timer), DuckDB's errors as one :class:`PolyprofError` line. ``polyprof sql`` over a
trace's tables and over a store's Parquet files both run their statement here
(``cli/sql.py``, ``store/store.py``), so both keep docs/reliability.md's promise 13."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

from ..errors import PolyprofError, TraceFormatError, one_line

#: a statement still running after this many seconds is stopped (``--timeout``)
TIMEOUT_S = 600.0


def run(con: Any, sql: str, timeout_s: float | None, tables: str,
        damaged: str | Path | None = None) -> tuple[Any, Iterator[Any]]:
    """``sql`` on ``con`` (memory-limited and sandboxed by the caller) as (schema, record
    batches); ``con`` is closed once the batches are read or fail. ``tables`` says what
    the sandbox leaves a query ("the trace's tables"), ``damaged`` the store whose files
    DuckDB failed to read (a TraceFormatError naming it)."""
    import duckdb
    import pyarrow as pa

    fired: list[bool] = []

    def stop() -> None:
        fired.append(True)
        con.interrupt()

    timer = threading.Timer(timeout_s, stop) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()

    def done() -> None:  # the timer thread ends and the connection closes before anything returns
        if timer is not None:
            timer.cancel()
            timer.join()
        con.close()

    def fail(e: BaseException) -> PolyprofError:
        done()
        said = one_line(e, None)  # DuckDB's whole message: it names the column, file or setting
        if isinstance(e, duckdb.PermissionException):
            return PolyprofError(f"SQL refused: {said} (polyprof sql gives a query {tables} only: "
                                 "no other files, ATTACH, extensions or network; --allow-external lifts this)")
        if isinstance(e, duckdb.InterruptException):
            return PolyprofError(f"SQL statement stopped after {timeout_s:g} s (--timeout / timeout_s)")
        if isinstance(e, duckdb.OutOfMemoryException):
            return PolyprofError(f"SQL statement needs more than the memory limit: "
                                 f"{said.split(' Possible solutions')[0]} (--memory-limit / memory_limit)")
        if damaged is not None and isinstance(e, duckdb.IOException):
            return TraceFormatError(damaged, f"damaged store file ({said})")
        return PolyprofError(f"SQL error: {said}")

    def stopped(e: RuntimeError) -> BaseException:
        """DuckDB's "Query interrupted": by the timer (``--timeout``), else by Ctrl-C
        (DuckDB stops the statement at a SIGINT): a KeyboardInterrupt, as elsewhere."""
        if "interrupted" not in str(e).lower():
            return e
        if fired:
            return fail(duckdb.InterruptException(str(e)))
        done()
        return KeyboardInterrupt()

    try:
        rel = con.sql(sql)
        if rel is None:  # a statement without a result
            done()
            return pa.schema([]), iter(())
        # duckdb 1.x names it fetch_record_batch (deprecated since; to_arrow_reader)
        to_reader = getattr(rel, "to_arrow_reader", None) or rel.fetch_record_batch
        reader = to_reader(1 << 16)
    except duckdb.Error as e:
        raise fail(e) from None
    except RuntimeError as e:
        raise stopped(e) from None

    def batches() -> Iterator[Any]:
        try:
            while True:
                try:
                    yield reader.read_next_batch()
                except StopIteration:
                    return
        except duckdb.Error as e:
            raise fail(e) from None
        except RuntimeError as e:
            raise stopped(e) from None
        except (pa.ArrowException, OSError) as e:  # DuckDB's error as it comes through the Arrow stream
            text = str(e)
            kind = (duckdb.InterruptException if text.startswith("INTERRUPT") else
                    duckdb.OutOfMemoryException if "Out of Memory" in text else
                    duckdb.IOException if damaged is not None and "IO Error" in text else duckdb.Error)
            raise fail(kind(text)) from None
        finally:
            done()

    return reader.schema, batches()
