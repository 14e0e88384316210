"""The crash journal's writer: host records appended to disk while the program runs.

A program killed by SIGKILL or the kernel's OOM killer never reaches the session's
stop, so nothing in memory is written. The journal keeps what the host plugin has
recorded so far (completed sections, marks, counters, steps and where step 0 begins,
process CPU/RSS, and a ``--schedule`` run's active stretches as steps pass) in
``OUTPUT.partial``, appended every ``interval`` seconds by a background thread; a
normal stop deletes it. ``polyprof.load("OUTPUT.partial")`` turns it back into a
Trace (formats/journal.py). Device plugins' data is not journaled: they hand it
over only at collect. The file's layout is formats/journal_layout.py.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, cast

import orjson

from ..trace.arrow_write import StreamWriter
from ..formats.journal_layout import (  # noqa: F401 - the format, re-exported for callers
    CHUNK,
    COUNTER,
    FIELDS,
    FIRST_STEP,
    MAGIC,
    MARK,
    PROCESS,
    SECTION,
    STEP,
    STRETCH,
    SUFFIX,
    THREAD,
    path_for,
    schema,
)
from ..formats.journal_layout import columns as _batch
from . import background
from .journal_file import KEEP_EARLIER, Sink, discard, finished, keep_earlier, where  # noqa: F401 - re-exported
from .recorder import _fast, set_growth, used_steps
from .steps import first_start

if TYPE_CHECKING:
    import numpy as np

    from ..trace.arrow_columns import Column
    from ..plugins.host import _Sampler
    from .recorder import Recorder

    #: name codes, start, end, thread ident, rows with stats
    SectionColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[int]]

log = logging.getLogger("polyprof")


def __getattr__(name: str) -> object:
    if name == "SCHEMA":
        return schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_JSON = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _stats_json(stats: dict[str, object] | None) -> str | None:
    """A section's keyword stats as JSON text. Never raises: a value JSON cannot hold as
    it is (an int beyond 64 bits, which orjson refuses even with ``default=str``; nesting
    beyond 254; an object whose ``str`` fails) is written as the text the trace keeps for
    it (``trace/stats.py``: a number's digits, a list's or dict's JSON text), so one odd
    value never stops the journal (only a failure of its file does)."""
    if not stats:
        return None
    return _json(stats).decode()


def _json(doc: dict[str, object]) -> bytes:
    """``doc`` as JSON, each value orjson refuses as its text (:func:`_stats_json`)."""
    try:
        return orjson.dumps(doc, default=str, option=_JSON)
    except (orjson.JSONEncodeError, TypeError):  # which value: each alone (rare)
        return orjson.dumps({k: _value(v) for k, v in doc.items()}, option=_JSON)


def _value(v: object) -> object:
    try:
        return orjson.Fragment(orjson.dumps(v, default=str, option=_JSON))
    except (orjson.JSONEncodeError, TypeError):
        return _text(v)


def _text(v: object) -> str:
    """What the trace holds for a value orjson cannot write: a number's digits, a list's
    or dict's JSON text (the standard library's: ints of any size), else ``str``."""
    import json  # only for the rare value orjson refuses

    try:
        if isinstance(v, (list, tuple, dict)):
            return json.dumps(v, default=str)
        return str(v)
    except Exception:  # deep nesting, a cycle, a __str__ that fails: its type alone
        return f"<{type(v).__name__}>"


#: sections per batch: small enough that the journal thread writes a batch every few
#: tens of ms under a burst (the "last second" promise), large enough to amortise a batch
SECTION_CHUNK = 1 << 16
#: batches of sections per flush (memory bounded; the writer loops at once when behind)
MAX_SECTION_BATCHES = 64
#: sections recorded between two looks of the growth hook on the recording thread
GROWTH_CHECK = 1 << 15
#: how long a completed section may wait for the journal's thread; past it, the thread
#: that records writes the backlog itself (a burst outruns the journal's thread, which
#: shares the GIL with it), so at most about a second is lost at any recording rate
CATCH_UP_NS = 400_000_000


def _columns_py(secs: list[tuple], index: dict[str, int], names: list[str]) -> SectionColumns:
    """The compiled ``_fastsection.columns`` in Python (``POLYPROF_PURE_PYTHON=1``, or no
    compiler): (name codes, start, end, ident, rows with stats), codes into ``names``."""
    import numpy as np

    from ..formats.hostrecords import section_columns  # only when a flush has sections

    name, t0, t1, stats, ident = section_columns(secs)
    for v in dict.fromkeys(name.tolist()):
        if v not in index:
            index[v] = len(names)
            names.append(v)
    codes = np.fromiter(map(index.__getitem__, name.tolist()), np.int32, len(secs))
    rows = np.flatnonzero(np.fromiter(map(bool, stats), bool, len(secs)))
    return codes, t0, t1, ident, rows.tolist()


def _columns_c(secs: list[tuple], index: dict[str, int], names: list[str]) -> SectionColumns:
    import numpy as np

    if _fast is None:
        raise RuntimeError("the compiled section columns are not built")

    codes, t0, t1, ident, rows = _fast.columns(secs, index, names)
    return (np.frombuffer(codes, np.int32), np.frombuffer(t0, np.int64), np.frombuffer(t1, np.int64),
            np.frombuffer(ident, np.int64), rows)


#: the section tuples into columns: "c" (one compiled pass) or "python"
IMPLEMENTATION = "c" if _fast is not None and hasattr(_fast, "columns") else "python"
section_columns = _columns_c if IMPLEMENTATION == "c" else _columns_py


class JournalWriter:
    """Appends what a Recorder (and the host sampler) gathered since the last flush."""

    def __init__(self, path: Path, header: dict[str, object], recorder: Recorder, sampler: _Sampler | None = None,
                 interval: float = 0.5, follow_symlinks: bool = False,
                 stretches: Callable[[int], list[tuple[int, int, int, int]]] | None = None):
        #: the path asked for (OUTPUT.partial); :attr:`path` is where the journal is
        #: (OUTPUT.partial.N while another run writes the same output)
        self.asked = Path(path)
        self.recorder = recorder
        self.sampler = sampler
        self.interval = interval
        #: a schedule's active stretches from the n-th on (schedule.Driver.stretches), or None
        self.stretches = stretches
        self._stretch_written: tuple[int, int, int, int] | None = None  # the last stretch row written
        #: sections recorded but not yet on disk after the latest flush (how far behind)
        self.behind = 0
        self.max_behind = 0
        #: the longest a completed section waited to be written (ns), seen at flushes
        self.max_lag_ns = 0
        self._in_child = False
        # never through a pre-planted symlink, never onto a device or directory, never
        # over another run's live journal
        self._file = Sink(self.asked, follow_symlinks)
        self.path = self._file.path
        try:
            self._file.write(MAGIC)
            # the schema (with the header) goes to disk now: a program killed before the
            # first flush leaves a valid file
            self._writer = StreamWriter(cast(BinaryIO, self._file), FIELDS,
                                        {b"polyprof": _json(header)})
        except BaseException:
            self._file.discard()
            raise
        self._pos: dict[str, int] = {"sections": 0, "steps": 0, "proc": 0, "stretches": 0}
        start = header.get("start_ns")
        self._start = start if isinstance(start, int) else 0
        self._begin_written = self._start  # where step 0 begins, as the journal says it (the header's start)
        self._buf_pos: dict[int, tuple[int, int]] = {}
        self._name_index: dict[str, int] = {}  # section names interned for the session
        self._names: list[str] = []
        self._name_bytes: list[bytes] = []
        self._encoded: np.ndarray | None = None  # the names' UTF-8 as an object array
        self._threads_seen: dict[int, tuple[str, int]] = {}
        self._lock = threading.Lock()
        # a thread the program's profilers (torch with_stack) never list (collect/background.py)
        self._thread: background.Background | None = background.start(self._tick, interval, "polyprof-journal")
        set_growth(self._on_growth, len(recorder.sections) + GROWTH_CHECK)

    def _tick(self) -> float | None:
        """One flush on the journal's thread; returns when to flush next (None: stop).
        A MemoryError leaves it: the program is out of memory, counted and tried again
        (background.py)."""
        self.flush()
        if self._file.closed:  # stopped (said once by flush)
            return None
        return 0.0 if self.behind else self.interval  # behind: catch up at once

    def _on_growth(self) -> int:
        """Every ``GROWTH_CHECK`` sections, on the thread that records them: if the oldest
        section not yet on disk ended more than ``CATCH_UP_NS`` ago, write now. A program
        that is not in a burst only pays the look. Returns when to look again."""
        if self._in_child or self._file.closed:
            return -1  # the hook turns itself off
        lag = self._lag_ns()
        if lag is not None and lag > CATCH_UP_NS:
            self.flush()
        return len(self.recorder.sections) + GROWTH_CHECK

    def _lag_ns(self) -> int | None:
        """How long ago the oldest section not yet on disk ended (None: none waits)."""
        with self.recorder.trim_lock:
            secs, p0 = self.recorder.sections, self._index()
            oldest = secs[p0][2] if p0 < len(secs) else None
        if oldest is None:
            return None
        from .clock import now_ns  # the sections' clock

        return now_ns() - oldest

    def flush(self) -> None:
        """Append what was recorded since the last flush. The journal must never disturb
        the program or the session's stop: a failure of its file stops it with one
        warning, never raised (a MemoryError is, for the journal's thread to try again)."""
        with self._lock:
            if self._file.closed:
                return
            try:
                self._flush()
            except MemoryError:
                raise
            except Exception as e:
                self._stop(e)

    def _flush(self) -> None:
        self.recorder.trim()
        lag = self._lag_ns()  # how far behind we are
        if lag is not None:
            self.max_lag_ns = max(self.max_lag_ns, lag)
        for batch in self._new_batches():  # each on disk as soon as it is built
            self._writer.write_batch(batch)
        self.behind = max(len(self.recorder.sections) - self._index(), 0)
        self.max_behind = max(self.max_behind, self.behind)

    def _stop(self, e: Exception) -> None:
        """The journal stops (its file failed, or a record could not be built); what it
        holds stays; said once."""
        log.warning("crash journal %s stopped: %s%s (the trace is still written from memory at the stop)",
                    self.path, "" if isinstance(e, OSError) else f"{type(e).__name__}: ", e)
        self._file.finish()  # what it holds stays, locked until the trace is saved

    def _index(self) -> int:
        """Where the next section to write is in the recorder's list, whose front may
        have been dropped (``max_sections``: those not yet written are lost here too)."""
        return max(self._pos["sections"] - self.recorder.dropped, 0)

    def _new_batches(self) -> Iterator[list[Column]]:
        """Everything recorded since the last flush, one batch per kind (sections: per
        ``SECTION_CHUNK``, at most ``MAX_SECTION_BATCHES`` a flush), built by columns and
        handed on one at a time, so each is written before the next is built."""
        r = self.recorder
        out: list[list[Column]] = []
        for _ in range(MAX_SECTION_BATCHES):  # the rest at the next flush, at once when behind
            with r.trim_lock:
                p0 = self._index()
                secs = r.sections[p0:p0 + SECTION_CHUNK]  # memory bounded by a batch
            if not secs:
                break
            batch = self._section_batch(secs)  # first: a MemoryError here loses nothing, the next flush retries
            self._pos["sections"] = r.dropped + p0 + len(secs)  # counted from the session's first section
            yield batch
        # the threads after the sections: every thread key they name is in it (one batch later at worst)
        threads = [(i, v) for i, v in list(r.threads.items()) if self._threads_seen.get(i) != v]
        if threads:
            self._threads_seen.update(threads)
            out.append(_batch(THREAD, len(threads), name=[v[0] for _, v in threads],
                              ident=[i for i, _ in threads], tid=[v[1] for _, v in threads]))
        for buf in list(r.buffers):
            m0, c0 = self._buf_pos.get(id(buf), (0, 0))
            m1 = min(len(buf.mark_names), len(buf.mark_ts))
            c1 = min(len(buf.ctr_names), len(buf.ctr_ts), len(buf.ctr_values))
            self._buf_pos[id(buf)] = (m1, c1)
            if m1 > m0:
                out.append(_batch(MARK, m1 - m0, name=[r.strings[i] for i in buf.mark_names[m0:m1]],
                                  start_ns=buf.mark_ts[m0:m1], ident=[buf.key] * (m1 - m0)))
            if c1 > c0:
                out.append(_batch(COUNTER, c1 - c0, name=[r.strings[i] for i in buf.ctr_names[c0:c1]],
                                  start_ns=buf.ctr_ts[c0:c1], value=buf.ctr_values[c0:c1],
                                  ident=[buf.key] * (c1 - c0)))
        begin = first_start(r, self._start)  # step 0's start: before the boundaries that end it
        if begin != self._begin_written:
            self._begin_written = begin
            out.append(_batch(FIRST_STEP, 1, start_ns=[begin]))
        if r.explicit_steps and self._pos.get("auto_written"):  # detected steps were written: the
            self._pos["steps"], self._pos["auto_written"] = 0, 0    # program's own come from their start
        steps = used_steps(r)[self._pos["steps"]:]
        if steps and not r.explicit_steps and not r.steps:
            self._pos["auto_written"] = 1
        if steps:
            self._pos["steps"] += len(steps)
            out.append(_batch(STEP, len(steps), start_ns=steps))
        if self.stretches is not None:
            out.extend(self._stretch_batch())
        s = self.sampler
        if s is not None:
            p0, p1 = self._pos["proc"], min(len(s.ts), len(s.cpu), len(s.rss), len(s.threads))
            if p1 > p0:
                self._pos["proc"] = p1
                out.append(_batch(PROCESS, p1 - p0, start_ns=s.ts[p0:p1], value=s.cpu[p0:p1],
                                  end_ns=[int(x) for x in s.rss[p0:p1]],
                                  tid=[int(x) for x in s.threads[p0:p1]]))
        yield from out

    def _stretch_batch(self) -> list[list[Column]]:
        """A schedule's active stretches begun, grown or closed since the last flush (after
        the steps that began them): a stretch's row again each time its end or its last step
        changed (the reader keeps the last), a closed one never again."""
        assert self.stretches is not None
        rows = self.stretches(self._pos["stretches"])
        new = [r for r in rows if r != self._stretch_written]  # (a few: the cycles since the last flush)
        if not new:
            return []
        self._stretch_written = rows[-1]
        self._pos["stretches"] += sum(r[1] >= 0 for r in rows)  # closed: written for good
        return [_batch(STRETCH, len(new), start_ns=[r[0] for r in new], end_ns=[r[1] for r in new],
                       ident=[r[2] for r in new], tid=[r[3] for r in new])]

    def _section_batch(self, secs: list[tuple]) -> list[Column]:
        """Section tuples as the journal's columns: names interned for the session and
        gathered, keyword stats as JSON only where present (most sections have none)."""
        import numpy as np

        from ..trace.arrow_columns import gathered_text, sparse_text  # only when a flush writes text

        codes, t0, t1, ident, rows = section_columns(secs, self._name_index, self._names)
        ident = self.recorder.thread_keys(ident, t0)  # one thread key per thread, as the session's trace
        if self._encoded is None or len(self._names) > len(self._name_bytes):
            self._name_bytes.extend(v.encode("utf-8", "surrogatepass") for v in self._names[len(self._name_bytes):])
            self._encoded = np.empty(len(self._name_bytes), object)
            self._encoded[:] = self._name_bytes
        n = len(secs)
        stats = sparse_text(n, np.asarray(rows, np.int64), [_stats_json(secs[i][3]) or "" for i in rows])
        return _batch(SECTION, n, name=gathered_text(codes, self._encoded), start_ns=t0, end_ns=t1, ident=ident,
                      stats=stats)

    def close(self, delete: bool) -> None:
        """Append what is left, stop; ``delete`` once the full trace is safely written
        elsewhere (only while the path still names this journal). Nothing is raised:
        the host plugin's stop must keep its data whatever the journal's file did."""
        if self._in_child:
            return  # the parent's file: not ours to touch
        set_growth(None, 0)
        thread, self._thread = self._thread, None
        if thread is not None:
            background.stop(thread, 5.0)  # from the journal's own thread: it ends after this call
        try:
            while not self._file.closed:  # everything recorded up to now goes to disk
                before = self._pos["sections"]
                self.flush()
                if self.behind == 0 or self._pos["sections"] == before:
                    break
        except Exception as e:  # out of memory: the in-memory trace is still saved normally
            log.warning("crash journal %s: last flush failed: %s", self.path, e)
        if self.max_behind:
            log.info("crash journal %s was up to %d sections (%.1f s) behind the program", self.path,
                     self.max_behind, self.max_lag_ns / 1e9)
        with self._lock:
            if not self._file.closed:
                try:
                    self._writer.close()  # the end-of-stream marker
                except Exception as e:
                    log.debug("crash journal %s: no end marker: %s", self.path, e)
                self._file.finish()
        finished(self.asked, self._file)  # deleted by discard() once the trace is saved
        if delete:
            discard(self.asked)

    def abandon_in_child(self) -> None:
        """In a forked child: never write, close or delete the parent's journal.

        The lock may have been held by the parent's journal thread at fork (that thread
        does not exist here), so it is replaced; the file descriptor (if still the
        journal's) is pointed at /dev/null so nothing the child's copy of the writer
        does can reach the file, and the writer sees its file closed."""
        set_growth(None, 0)
        self._lock = threading.Lock()
        thread, self._thread = self._thread, None
        if thread is not None:
            background.stop(thread, 0.0)  # not running here: only forgotten
        self._file.abandon()
        self._in_child = True
