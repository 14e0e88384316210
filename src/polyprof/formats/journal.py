"""Read a crash journal (``OUTPUT.partial``, collect/journal.py) back into a Trace:
the host data of a program that was killed before its session could stop."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ..collect import journal as j
from ..collect.clock import REFERENCE_CLOCK
from ..collect.hosttrace import HostRecords, build
from ..errors import TraceFormatError
from ..trace.core import Trace

log = logging.getLogger("polyprof")


def sniff(head: bytes, path: Path) -> bool:
    return head.startswith(j.MAGIC)


def load(path: str | Path) -> Trace:
    path = Path(path)
    data = path.read_bytes()
    if not data.startswith(j.MAGIC):
        raise TraceFormatError(path, "not a polyprof crash journal")
    batches: list[pa.RecordBatch] = []
    complete = True
    try:
        reader = ipc.open_stream(pa.BufferReader(data[len(j.MAGIC):]))
    except (pa.ArrowInvalid, OSError) as e:
        raise TraceFormatError(path, f"journal has no readable header ({e}); the program was killed "
                                     "before its first flush") from None
    header = orjson.loads((reader.schema.metadata or {}).get(b"polyprof", b"{}"))
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError):  # the last batch was cut short by the kill
            complete = False
            break
    table = pa.Table.from_batches(batches, schema=reader.schema)
    trace = build(_records(table, header), _metadata(path, header, table, complete))
    log.info("%s: recovered %d events from a crash journal", path, trace.n_events)
    return trace


def _records(table: pa.Table, header: dict) -> HostRecords:
    def pick(k: int, *names: str) -> list[np.ndarray]:
        rows = table.filter(pc.equal(table.column("kind"), k))  # per kind, the used fields have no nulls
        return [rows.column(n).to_numpy(zero_copy_only=False) for n in names]

    h = HostRecords(start_ns=int(header.get("start_ns", 0)), pid=int(header.get("pid", 0)),
                    hostname=str(header.get("hostname", "")))
    idents, tnames, tids = pick(j.THREAD, "ident", "name", "tid")
    h.threads = {int(i): (str(n), int(t)) for i, n, t in zip(idents, tnames, tids)}
    h.main_ident = int(idents[0]) if len(idents) else None  # the session's thread is noted first
    h.sec_names, h.sec_start, h.sec_end, stats, h.sec_ident = pick(j.SECTION, "name", "start_ns", "end_ns",
                                                                  "stats", "ident")
    h.sec_stats = [orjson.loads(s) if s else None for s in stats]
    h.mark_names, h.mark_ts, h.mark_ident = pick(j.MARK, "name", "start_ns", "ident")
    h.ctr_names, h.ctr_ts, h.ctr_values = pick(j.COUNTER, "name", "start_ns", "value")
    (h.steps,) = pick(j.STEP, "start_ns")
    h.proc_ts, h.proc_cpu, h.proc_rss, h.proc_threads = pick(j.PROCESS, "start_ns", "value", "end_ns", "tid")
    return h


def _metadata(path: Path, header: dict, table: pa.Table, complete: bool) -> dict:
    ends = table.filter(pc.equal(table.column("kind"), j.SECTION)).column("end_ns")  # PROCESS rows keep RSS there
    last = max(pc.max(table.column("start_ns")).as_py() or 0, pc.max(ends).as_py() or 0) \
        or int(header.get("start_ns", 0))
    note = (f"recovered from the crash journal {path.name}: the program ended without stopping its "
            "session (killed?); host sections, marks, counters, steps and process samples up to the "
            "last flush are here, device plugins' data is lost"
            + ("" if complete else "; the last write was cut short and dropped"))
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
