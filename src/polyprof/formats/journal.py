"""Read a crash journal (``OUTPUT.partial``, formats/journal_layout.py) back into a Trace:
the host data of a program that was killed before its session could stop."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..trace.metadata_keys import REFERENCE_CLOCK, SCHEDULE, SESSION, WARNINGS
from ..errors import TraceFormatError, one_line
from ..trace.core import Trace
from . import arrow_ipc
from . import journal_layout as j
from .hostrecords import HostRecords, build
from .safety import TIME_LIMIT_NS, Inflation, check_events, clean_metadata, guarded

log = logging.getLogger("polyprof")


def sniff(head: bytes, path: Path) -> bool:
    return head.startswith(j.MAGIC)


#: per record kind, the fields it must have (others may be null)
_REQUIRED = {j.THREAD: ("ident", "name", "tid"), j.SECTION: ("name", "start_ns", "end_ns", "ident"),
             j.MARK: ("name", "start_ns", "ident"), j.COUNTER: ("name", "start_ns", "value"),
             j.STEP: ("start_ns",), j.PROCESS: ("start_ns", "value", "end_ns", "tid"),
             j.STRETCH: ("start_ns", "end_ns", "ident", "tid"), j.FIRST_STEP: ("start_ns",)}
#: header fields and their types (others are kept as they are)
_HEADER_TYPES = {"start_ns": int, "pid": int, "hostname": str, "argv": list, "wall_anchor": dict, "window": dict,
                 "schedule": dict}


@guarded
def load(path: str | Path) -> Trace:
    """The host data in a crash journal: every whole batch before the first damaged one.

    Each batch is validated in full before it is used (damaged Arrow buffers crash
    pyarrow rather than raise); records with a field missing, an unknown kind or a
    time beyond +-2**62 ns are dropped and counted in the trace's warnings."""
    path = Path(path)
    try:  # mapped, not read: the file's pages are the OS's cache, not the process's heap
        data = pa.memory_map(str(path)).read_buffer()
    except (OSError, pa.ArrowException) as e:
        raise TraceFormatError(path, f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if data[:len(j.MAGIC)].to_pybytes() != j.MAGIC:
        raise TraceFormatError(path, "not a polyprof crash journal")
    try:
        stream = arrow_ipc.Stream(data[len(j.MAGIC):], Inflation(path, data.size, "the journal's compressed Arrow data"))
    except (pa.ArrowException, ValueError, OSError, struct.error) as e:
        raise TraceFormatError(path, f"journal has no readable header ({e}); the program was killed "
                                     "before its first flush") from None
    if not stream.schema.equals(j.schema(), check_metadata=False):
        raise TraceFormatError(path, "journal records do not have the journal's schema: damaged, or written by "
                                     "another version of polyprof")
    header, notes = _header(stream.schema.metadata or {})
    batches, bad = _batches(stream, path)
    if bad:
        notes.append(bad)
    table = pa.Table.from_batches(batches, schema=j.schema())
    check_events(path, table.num_rows)
    table, dropped = _valid_rows(table)
    if dropped:
        notes.append(f"{dropped} damaged record(s) dropped")
    meta = _metadata(path, header, table, notes)
    clean_metadata(meta)
    records = _records(table, header)
    stretches = _stretch_rows(table)
    del table, batches, stream, data  # the records are copies: the journal's columns go before the build
    trace = build(records, meta)
    if isinstance(header.get("window"), dict):
        _window(trace, header["window"])
    elif isinstance(header.get("schedule"), dict):
        _schedule(trace, header["schedule"], stretches, len(records.steps))
    log.info("%s: recovered %d events from a crash journal", path, trace.n_events)
    return trace


def _window(trace: Trace, window: dict) -> None:
    """A ``--delay``/``--duration`` run's window (the header's ``window``: delay_s,
    duration_s, windows_ns) in the recovered trace's ``schedule``, as a finished run has
    it: its recorded steps are those wholly inside it, which the analyses keep to. The
    journal holds the whole run's host data (the host plugin records outside a window)."""
    from ..derive.steps import find_steps  # a window's journal only

    wins = window.get("windows_ns")
    if not (isinstance(wins, list) and len(wins) == 1 and isinstance(wins[0], list) and len(wins[0]) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and abs(v) <= TIME_LIMIT_NS for v in wins[0])):
        trace.metadata.setdefault(WARNINGS, []).append("the window in the journal's header is damaged: ignored")
        return
    lo, hi = wins[0]
    stop = int(trace.metadata[SESSION]["stop_ns"])
    steps = find_steps(trace)
    whole = (steps.start >= lo) & (steps.end <= (stop if hi < 0 else hi))
    trace.metadata[SCHEDULE] = {"delay_s": window.get("delay_s"), "duration_s": window.get("duration_s"),
                                  "windows_ns": [[lo, hi]], "recorded_steps": steps.number[whole].tolist()}
    if stop < lo:
        trace.metadata.setdefault(WARNINGS, []).append("the program ended before its window opened: nothing in it was recorded")


#: a step schedule's fields in the journal's header (collect/schedule.py ``Schedule``)
_PLAN = ("wait", "warmup", "active", "repeat", "skip_first")


def _stretch_rows(table: pa.Table) -> tuple[np.ndarray, ...]:
    """A ``--schedule`` run's stretch records (start, end (-1 open), first and last step
    recorded), the last written of each stretch (by its start), in time order."""
    rows = table.select(["start_ns", "end_ns", "ident", "tid"]).filter(pc.equal(table.column("kind"), j.STRETCH))
    start, end, first, last = (rows.column(i).to_numpy().astype(np.int64) for i in range(4))
    order = np.argsort(start, kind="stable")  # a stretch's rows in the order written
    keep = order[np.r_[start[order][1:] != start[order][:-1], True]] if len(order) else order
    return start[keep], end[keep], first[keep], last[keep]


def _schedule(trace: Trace, plan: dict, stretches: tuple[np.ndarray, ...], n_marks: int) -> None:
    """A ``--schedule`` run's plan (the header's ``schedule``) and the active stretches its
    journal recorded as steps passed, in the recovered trace's ``schedule`` as a finished
    run has them (``windows_ns``, one still open closed at the journal's last record, and
    ``recorded_steps``), so the summary of a killed scheduled run's ``.partial`` analyses
    its recorded stretches as the finished trace would. The journal holds the whole run's
    host data: the steps between the stretches are in it, not analysed. Damaged stretch
    records (steps backwards, past the steps begun or within an earlier stretch's; an end
    before the start) are dropped and said."""
    start, end, first, last = stretches
    stop = int(trace.metadata[SESSION]["stop_ns"])
    ok = (first >= 0) & (last >= first) & (last <= n_marks) & ((end == -1) | (end >= start))
    ok[1:] &= first[1:] > np.maximum.accumulate(np.where(ok, last, -1))[:-1]  # after the stretches before
    if not ok.all():
        trace.metadata.setdefault(WARNINGS, []).append(
            f"{int((~ok).sum())} damaged schedule stretch record(s) in the journal: ignored")
        start, end, first, last = start[ok], end[ok], first[ok], last[ok]
    end = np.where(end < 0, np.maximum(stop, start), end)
    n = last - first + 1  # the stretches' step numbers, first..last of each (bounded by the steps begun)
    steps = np.repeat(first - np.r_[0, np.cumsum(n)[:-1]], n) + np.arange(int(n.sum()))
    meta = {k: plan[k] for k in _PLAN if isinstance(plan.get(k), int) and not isinstance(plan[k], bool)}
    trace.metadata[SCHEDULE] = {**meta, "recorded_steps": steps.tolist(),
                                "windows_ns": np.stack([start, end], axis=1).tolist()}
    if not len(start):
        trace.metadata.setdefault(WARNINGS, []).append(
            "the schedule recorded no step before the program ended (its journal holds no active stretch): "
            "every step is analysed")


def _header(meta: dict) -> tuple[dict, list[str]]:
    """The session header from the schema's metadata; damaged fields dropped, with a note."""
    try:
        header = orjson.loads(meta.get(b"polyprof", b"{}"))
    except orjson.JSONDecodeError:
        return {}, ["the session header is damaged (start time, pid, host unknown)"]
    if not isinstance(header, dict):
        return {}, ["the session header is damaged (start time, pid, host unknown)"]
    bad = [k for k, t in _HEADER_TYPES.items() if k in header and (not isinstance(header[k], t) or isinstance(
        header[k], bool) or (t is int and not -TIME_LIMIT_NS <= header[k] <= TIME_LIMIT_NS))]
    if isinstance(header.get("argv"), list) and not all(isinstance(a, str) for a in header["argv"]):
        bad.append("argv")
    for k in bad:
        del header[k]
    return header, ([f"damaged session header fields dropped: {', '.join(sorted(bad))}"] if bad else [])


def _batches(stream: arrow_ipc.Stream, path: Path) -> tuple[list[pa.RecordBatch], str]:
    """Whole, valid batches up to the first damaged, cut or oversized one (its compressed
    buffers bounded before they are inflated); and a note if there was one."""
    out: list[pa.RecordBatch] = []
    while True:
        try:
            batch = stream.next_batch()
        except StopIteration:
            return out, ""
        except TraceFormatError as e:  # a limit: what came before is kept
            return out, f"batch {len(out)} refused ({e.problem}): it and everything after it dropped"
        except (pa.ArrowException, ValueError, OSError, struct.error) as e:
            cut = isinstance(e, (OSError, EOFError)) or "read" in str(e).lower() and "expected" in str(e).lower()
            log.debug("%s: journal batch %d: %s", path, len(out), e)
            return out, ("the last write was cut short and dropped" if cut else
                         f"batch {len(out)} is damaged ({one_line(e, 120)}): it and everything after it dropped")
        if not batch.schema.equals(j.schema(), check_metadata=False):
            return out, f"batch {len(out)} has another schema: it and everything after it dropped"
        out.append(batch)


def _valid_rows(table: pa.Table) -> tuple[pa.Table, int]:
    """Rows of a known kind with every field that kind needs, and times in range."""
    kind = table.column("kind")
    keep = pa.array(np.zeros(table.num_rows, bool))
    for k, fields in _REQUIRED.items():
        ok = pc.equal(kind, k)
        for f in fields:
            ok = pc.and_(ok, pc.is_valid(table.column(f)))
        keep = pc.or_(keep, pc.fill_null(ok, False))
    for f in ("start_ns", "end_ns"):
        col = table.column(f)
        inside = pc.and_(pc.greater_equal(col, -TIME_LIMIT_NS), pc.less_equal(col, TIME_LIMIT_NS))
        keep = pc.and_(keep, pc.fill_null(inside, True))
    sec = pc.equal(kind, j.SECTION)
    backwards = pc.and_(sec, pc.less(table.column("end_ns"), table.column("start_ns")))
    keep = pc.and_(keep, pc.invert(pc.fill_null(backwards, False)))
    if pc.all(keep).as_py():  # the usual case: no copy of the whole table
        return table, 0
    out = table.filter(keep)
    return out, table.num_rows - out.num_rows


def _records(table: pa.Table, header: dict) -> HostRecords:
    def pick(k: int, *names: str) -> list[np.ndarray]:
        # per kind, the used fields have no nulls; only those columns are copied
        rows = table.select(list(names)).filter(pc.equal(table.column("kind"), k))
        return [_names(rows.column(n)) if n == "name" else rows.column(n).to_numpy(zero_copy_only=False)
                for n in names]

    h = HostRecords(start_ns=int(header.get("start_ns", 0)), pid=int(header.get("pid", 0)),
                    hostname=str(header.get("hostname", "")))
    idents, tnames, tids = pick(j.THREAD, "ident", "name", "tid")
    h.threads = {int(i): (str(n), int(t)) for i, n, t in zip(idents, tnames, tids)}
    h.main_ident = int(idents[0]) if len(idents) else None  # the session's thread is noted first
    h.sec_names, h.sec_start, h.sec_end, stats, h.sec_ident = pick(j.SECTION, "name", "start_ns", "end_ns",
                                                                  "stats", "ident")
    h.sec_stats = np.full(len(stats), None, object)  # most sections have none: only those with some parsed
    given = np.flatnonzero(_given(stats))
    h.sec_stats[given] = [_section_stats(s) for s in stats[given].tolist()]
    h.mark_names, h.mark_ts, h.mark_ident = pick(j.MARK, "name", "start_ns", "ident")
    h.ctr_names, h.ctr_ts, h.ctr_values = pick(j.COUNTER, "name", "start_ns", "value")
    (h.steps,) = pick(j.STEP, "start_ns")
    (begins,) = pick(j.FIRST_STEP, "start_ns")  # where step 0 begins, when not at the start: the last written
    if len(begins):  # (a damaged one, outside the session's start and the first boundary, bounded by them)
        h.start_ns = max(h.start_ns, min(int(begins[-1]), int(h.steps.min()) if len(h.steps) else int(begins[-1])))
    h.proc_ts, h.proc_cpu, h.proc_rss, h.proc_threads = pick(j.PROCESS, "start_ns", "value", "end_ns", "tid")
    return h


def _names(col: pa.ChunkedArray) -> np.ndarray:
    """A string column as an object array whose rows share one str per distinct name
    (a str per row would cost some 60 bytes an event)."""
    enc = pc.dictionary_encode(col).combine_chunks()
    words = np.array(enc.dictionary.to_pylist() + [""], dtype=object)
    return words[enc.indices.fill_null(len(words) - 1).to_numpy()]


def _given(values: np.ndarray) -> np.ndarray:
    """Rows of an object array that are neither None nor empty."""
    return (values != None) & (values != "")  # noqa: E711 (elementwise, in C)


def _section_stats(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        v = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"damaged_stats": text[:200]}
    return v if isinstance(v, dict) else {"value": v}


def _metadata(path: Path, header: dict, table: pa.Table, notes: list[str]) -> dict:
    ends = pc.filter(table.column("end_ns"), pc.equal(table.column("kind"), j.SECTION))  # PROCESS rows: RSS there
    last = max(pc.max(table.column("start_ns")).as_py() or 0, pc.max(ends).as_py() or 0) \
        or int(header.get("start_ns", 0))
    note = (f"recovered from the crash journal {path.name}: the program ended without stopping its "
            "session (killed?), or its trace could not be written (a full disk: the run said why); host sections, marks, counters, steps and process samples up to the "
            "last flush are here, device plugins' data is lost"
            + "".join(f"; {n}" for n in notes))
    return {
        "clock": REFERENCE_CLOCK,
        "session": {"start_ns": int(header.get("start_ns", 0)), "stop_ns": last,
                    **{k: header[k] for k in ("pid", "hostname", "argv") if k in header}},
        "wall_anchor": header.get("wall_anchor", {}),
        "plugins": {"host": "recovered"},
        "plugin_errors": [],
        "warnings": [note],
        "recovered_from": str(path),
    }
