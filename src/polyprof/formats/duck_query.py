"""One DuckDB statement, bounded: its result read in record batches as they are computed
(a cross join is never held whole), stopped after ``timeout_s`` (``con.interrupt`` from
a timer), DuckDB's errors as one :class:`PolyprofError` line. ``polyprof sql`` over a
trace's tables and over a store's Parquet files both run their statement here
(``cli/sql.py``, ``store/store.py``), so both keep docs/reliability.md's promise 13."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
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
    ctrl_c = _CtrlC(con)

    def done() -> None:  # the timer thread ends and the connection closes before anything returns
        if timer is not None:
            timer.cancel()
            timer.join()
        ctrl_c.close()
        con.close()

    def fail(e: BaseException) -> BaseException:
        done()
        said = one_line(e, None)  # DuckDB's whole message: it names the column, file or setting
        if isinstance(e, duckdb.PermissionException):
            return PolyprofError(f"SQL refused: {said} (polyprof sql gives a query {tables} only: "
                                 "no other files, ATTACH, extensions or network; --allow-external lifts this)")
        if isinstance(e, duckdb.InterruptException):  # by the timer, else by Ctrl-C (_CtrlC)
            if not fired:
                return KeyboardInterrupt()
            return PolyprofError(f"SQL statement stopped after {timeout_s:g} s (--timeout / timeout_s)")
        if isinstance(e, duckdb.OutOfMemoryException):
            return PolyprofError(f"SQL statement needs more than the memory limit: "
                                 f"{said.split(' Possible solutions')[0]} (--memory-limit / memory_limit)")
        if damaged is not None and isinstance(e, duckdb.IOException):
            return TraceFormatError(damaged, f"damaged store file ({said})")
        return PolyprofError(f"SQL error: {said}")

    def stopped(e: RuntimeError) -> BaseException:
        """DuckDB's "Query interrupted" (a RuntimeError), as its InterruptException: by the
        timer (``--timeout``), else by Ctrl-C: a KeyboardInterrupt, as elsewhere (:func:`fail`)."""
        if "interrupted" not in str(e).lower():
            return e
        return fail(duckdb.InterruptException(str(e)))

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


class _CtrlC:
    """Ctrl-C stops the statement, whenever it comes. DuckDB interrupts a running statement
    at a SIGINT, but one that comes while it is still preparing the statement (DuckDB 2.0's
    ``_submit`` runs Python's handler there) is forgotten once the statement starts, which
    then ran to its end (10-20 s of a 3-billion-row count here; up to ``--timeout``). So,
    while the statement runs, a SIGINT (where Python's own handler is in place, in the
    main thread) also starts a thread that interrupts the connection every 50 ms until the
    statement is over; the KeyboardInterrupt is raised as before."""

    def __init__(self, con: Any) -> None:
        self.con = con
        self.over = threading.Event()
        self.thread: threading.Thread | None = None
        self.installed = (threading.current_thread() is threading.main_thread()
                          and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if self.installed:
            signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.thread is None and not self.over.is_set():
            self.thread = threading.Thread(target=self._interrupt, name="polyprof-sql-interrupt", daemon=True)
            self.thread.start()
        signal.default_int_handler(signum, frame)

    def _interrupt(self) -> None:
        # 10 s at most: the statement a KeyboardInterrupt left unread (never iterated, so
        # never closed) must not keep a thread busy for the rest of the process
        for _ in range(200):
            try:
                self.con.interrupt()
            except Exception:  # noqa: BLE001 - a connection closed meanwhile: nothing left to stop
                return
            if self.over.wait(0.05):
                return

    def close(self) -> None:
        """The statement is over: no more interrupts (before the connection closes), and
        Python's own handler back."""
        self.over.set()
        if self.thread is not None:
            self.thread.join()
        if self.installed and signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
