"""One rocpd run's tables as parts (formats/parts.py) and the descriptions around them.

Process keys are ``run index << 32 | rocpd_info_process.id``; device parts' ``dev`` is
the agent's row id and ``tid`` minus the queue's row id; host parts' ``tid`` is the OS
thread id (``rocpd_info_thread.tid``).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from ...trace import keys
from ...trace.sorting import unique_inverse
from .. import rocm_trace, sqlite_bounds, sqlite_db
from ..parts import Part, set_stat, triples
from ..sqlite_db import quote
from .layout import Run

#: names longer than this are cut (sqlite_bounds.MAX_NAME_CHARS)
_CUT = sqlite_bounds.MAX_NAME_CHARS


def _rows(conn: sqlite3.Connection, run: Run, base: str, cols: list[str]) -> list[tuple]:
    have = [c for c in cols if run.has(base, c)]
    if not run.has(base, "id") or not have:
        return []
    got = sqlite_db.rows(conn, f"SELECT id, {', '.join(quote(c) for c in have)} FROM {quote(run.t(base))}")
    return [(r[0], dict(zip(have, r[1:]))) for r in got if isinstance(r[0], int)]  # type: ignore[misc]


def _int(d: dict[str, object], key: str, table: str) -> int:
    """An integer cell (NULL: 0); text or a blob there is a damaged database."""
    v = d.get(key)
    if v is None:
        return 0
    if not isinstance(v, int):
        raise sqlite3.DatabaseError(f"{table}.{key} holds {type(v).__name__}, not an integer")
    return v


class Info:
    """A run's processes, threads, agents, queues, strings and kernel symbols."""

    def __init__(self, conn: sqlite3.Connection, run: Run, index: int):
        self.run, self.base = run, index << 32
        self.notes: list[str] = []  # warnings (the reader names the file)
        hosts = {i: str(d.get("hostname") or "") for i, d in _rows(conn, run, "rocpd_info_node", ["hostname"])}
        self.processes: dict[int, rocm_trace.Process] = {}
        for i, d in _rows(conn, run, "rocpd_info_process", ["pid", "nid", "command", "name"]):
            self.processes[self.base | i] = rocm_trace.Process(
                pid=_int(d, "pid", "rocpd_info_process"), host=hosts.get(d.get("nid"), ""),  # type: ignore[arg-type]
                name=str(d.get("name") or d.get("command") or ""))
        self.thread_tid: dict[int, int] = {}
        for i, d in _rows(conn, run, "rocpd_info_thread", ["pid", "tid", "name"]):
            tid = _int(d, "tid", "rocpd_info_thread")
            self.thread_tid[i] = tid
            pr = self.processes.get(self.base | _int(d, "pid", "rocpd_info_thread"))
            if pr is not None and d.get("name"):
                pr.threads[tid] = str(d["name"])
        self.agents: dict[tuple[int, int], rocm_trace.Agent] = {}
        self.gpu: set[int] = set()
        agent_cols = ["pid", "type", "type_index", "logical_index", "absolute_index", "name", "product_name",
                      "model_name", "vendor_name", "user_name"]
        for i, d in _rows(conn, run, "rocpd_info_agent", agent_cols):
            if d.get("type") != "GPU":
                continue
            self.gpu.add(i)
            idx = next((d[k] for k in ("type_index", "logical_index", "absolute_index")
                        if isinstance(d.get(k), int)), len(self.gpu) - 1)
            props = {k: d[k] for k in ("name", "product_name", "model_name", "vendor_name") if d.get(k) is not None}
            props["agent_id"] = i
            for g in self.processes:
                self.agents[(g, i)] = rocm_trace.Agent(int(idx), True, props)
        self.queue_names: dict[tuple[int, int, int], str] = {}
        self.queues = {i: str(d.get("name") or "") for i, d in _rows(conn, run, "rocpd_info_queue", ["name"])}
        self.strings: dict[int, str] = {}
        if run.has("rocpd_string", "id", "string"):
            self.strings = {int(i): str(s) for i, s in sqlite_db.rows(
                conn, f"SELECT id, substr(string, 1, {_CUT}) FROM {quote(run.t('rocpd_string'))}") if isinstance(i, int)}
        self.categories = dict(self.strings)
        if run.has("rocpd_info_category", "id", "name"):  # 4.x
            self.categories = {int(i): str(s) for i, s in sqlite_db.rows(
                conn, f"SELECT id, substr(name, 1, {_CUT}) FROM {quote(run.t('rocpd_info_category'))}") if isinstance(i, int)}
        self.symbols = {i: d for i, d in _rows(conn, run, "rocpd_info_kernel_symbol",
                                               ["display_name", "kernel_name", "arch_vgpr_count", "sgpr_count"])}

    def procs(self, pid_rows: np.ndarray) -> np.ndarray:
        return np.where(pid_rows >= 0, self.base | pid_rows, -1)

    def tids(self, thread_rows: np.ndarray) -> np.ndarray:
        uniq, inv = unique_inverse(thread_rows)
        return np.array([self.thread_tid.get(int(u), int(u)) for u in uniq.tolist()], np.int64)[inv]

    def names(self, ids: np.ndarray, table: dict[int, str], clean: Any = None, rows: str = "",
              of: str = "rocpd_string", what: str = "string") -> tuple[np.ndarray, list[str]]:
        """(code per id, names) of ids into ``table`` (rows of ``of``); an id it lacks is
        named ``[<what> N]``, NULL ``[no <what>]``, the rows counted in the notes (``rows``:
        their table)."""
        uniq, inv = unique_inverse(ids)
        vals = [table.get(u, f"[{what} {u}]" if u >= 0 else f"[no {what}]") for u in uniq.tolist()]
        lost = [k for k, u in enumerate(uniq.tolist()) if u not in table]
        if lost:
            shown = ", ".join("NULL" if u < 0 else str(u) for u in uniq[lost[:5]].tolist()) + (", ..." * (len(lost) > 5))
            self.notes.append(f"{int(np.isin(inv, lost).sum())} row(s) of {rows or 'a table'} hold a {what} id that "
                              f"{of} lacks, or NULL ({shown}; a damaged file): named [{what} N] by the id, "
                              f"[no {what}] where NULL")
        return inv.astype(np.int64), [clean(v) for v in vals] if clean else vals


def kernels(conn: sqlite3.Connection, info: Info) -> Part | None:
    run, base = info.run, "rocpd_kernel_dispatch"
    if not run.has(base, "start", "end", "kernel_id"):
        return None
    exprs = {"start": "start", "end": "end", "kernel_id": "kernel_id", "pid": run.where(base, "pid"),
             "agent": run.where(base, "agent_id"), "queue": run.where(base, "queue_id"),
             "stream": run.where(base, "stream_id"), "corr": run.correlation(base)}
    for col in ("dispatch_id", "grid_size_x", "grid_size_y", "grid_size_z", "workgroup_size_x", "workgroup_size_y",
              "workgroup_size_z", "group_segment_size", "private_segment_size"):
        if run.has(base, col):
            exprs[col] = col
    c = sqlite_db.read_columns(conn, run.t(base), exprs, not_null=run.schema.not_null(run.t(base)),
                               required=("start", "end", "pid", "agent", "queue"), notes=info.notes)
    n = len(c["start"])
    codes, vals = info.names(c["kernel_id"], {i: str(d.get("display_name") or d.get("kernel_name") or f"kernel {i}")
                                             for i, d in info.symbols.items()}, rows=run.t(base),
                             of=run.t("rocpd_info_kernel_symbol"), what="kernel symbol")
    stats: dict[str, Any] = {}
    set_stat(stats, keys.CORRELATION_ID, c["corr"])
    set_stat(stats, keys.STREAM, c["stream"])
    set_stat(stats, keys.QUEUE, c["queue"])
    if "dispatch_id" in c:
        stats["dispatch id"] = c["dispatch_id"]
    if all(f"grid_size_{a}" in c for a in "xyz"):
        stats[keys.GRID] = triples(*(c[f"grid_size_{a}"] for a in "xyz"))
    if all(f"workgroup_size_{a}" in c for a in "xyz"):
        stats[keys.BLOCK] = triples(*(c[f"workgroup_size_{a}"] for a in "xyz"))
    if "group_segment_size" in c:
        set_stat(stats, "shared memory", c["group_segment_size"])
    if "private_segment_size" in c:
        set_stat(stats, "scratch memory", c["private_segment_size"])
    procs = info.procs(c["pid"])
    for g, a, q in {(int(g), int(a), int(q)) for g, a, q in zip(procs.tolist(), c["agent"].tolist(),
                                                              c["queue"].tolist())}:
        if info.queues.get(q):
            info.queue_names[(g, a, -q)] = info.queues[q]
    return Part(base, True, c["start"], c["end"], procs, -c["queue"], c["agent"], codes, vals,
                np.zeros(n, np.int64), [keys.CAT_KERNEL], stats, c["corr"])


def copies(conn: sqlite3.Connection, info: Info) -> Part | None:
    run, base = info.run, "rocpd_memory_copy"
    if not run.has(base, "start", "end"):
        return None
    exprs = {"start": "start", "end": "end", "pid": run.where(base, "pid"), "queue": run.where(base, "queue_id"),
             "stream": run.where(base, "stream_id"), "corr": run.correlation(base),
             "dst": "dst_agent_id" if run.has(base, "dst_agent_id") else "NULL",
             "src": "src_agent_id" if run.has(base, "src_agent_id") else "NULL",
             "size": "size" if run.has(base, "size") else "NULL",
             "name_id": "name_id" if run.has(base, "name_id") else "NULL"}
    c = sqlite_db.read_columns(conn, run.t(base), exprs, not_null=run.schema.not_null(run.t(base)),
                               required=("start", "end", "pid"), notes=info.notes)
    on = np.where(np.isin(c["dst"], list(info.gpu)), c["dst"], c["src"])
    if (on < 0).any():  # neither agent known (NULL): on no device
        info.notes.append(f"{int((on < 0).sum())} row(s) of {run.t(base)} left out: NULL in src_agent_id, and "
                          "dst_agent_id names no GPU, so they are on no device")
        c = {k: v[on >= 0] for k, v in c.items()}
        on = on[on >= 0]
    n = len(c["start"])
    codes, vals = info.names(c["name_id"], info.strings, rocm_trace.copy_name, rows=run.t(base),
                             of=run.t("rocpd_string")) if run.has(base, "name_id") else (np.zeros(n, np.int64), ["Memcpy"])
    stats: dict[str, Any] = {"dst agent": c["dst"], "src agent": c["src"]}
    set_stat(stats, keys.BYTES, c["size"])
    set_stat(stats, keys.CORRELATION_ID, c["corr"])
    set_stat(stats, keys.STREAM, c["stream"])
    return Part(base, True, c["start"], c["end"], info.procs(c["pid"]), -np.maximum(c["queue"], 0), on, codes, vals,
                np.zeros(n, np.int64), [keys.CAT_MEMCPY], stats, c["corr"])


def regions(conn: sqlite3.Connection, info: Info) -> Part | None:
    """API calls (HIP, HSA, RCCL) and ROCTx ranges and marks, on their threads."""
    run, base = info.run, "rocpd_region"
    if not run.has(base, "start", "end", "name_id"):
        return None
    exprs = {"start": "start", "end": "end", "name_id": "name_id", "pid": run.where(base, "pid"),
             "tid": run.where(base, "tid"), "corr": run.correlation(base), "category": run.category(base)}
    c = sqlite_db.read_columns(conn, run.t(base), exprs, not_null=run.schema.not_null(run.t(base)),
                               required=("start", "end", "pid", "tid"), notes=info.notes)
    codes, vals = info.names(c["name_id"], info.strings, rows=run.t(base), of=run.t("rocpd_string"))
    cat_ids, inv = unique_inverse(c["category"])
    kind = [info.categories.get(int(i), "") for i in cat_ids.tolist()]
    marker = np.array([k.startswith("MARKER_") for k in kind], bool)[inv.ravel()]
    instant = marker & (c["end"] <= c["start"])
    cats = [rocm_trace.api_category(k) if k else "rocpd_region" for k in kind]
    ccode = inv.ravel().astype(np.int64)
    cats.append(rocm_trace.CAT_ROCTX_MARK)
    ccode = np.where(instant, len(cats) - 1, ccode)
    stats: dict[str, Any] = {}
    api = ~marker
    rows = np.flatnonzero(api & (c["corr"] > 0))
    if len(rows):
        stats[keys.CORRELATION_ID] = (rows, c["corr"][rows])
    corr = np.where(api, c["corr"], -1)
    return Part(base, False, c["start"], c["end"], info.procs(c["pid"]), info.tids(c["tid"]),
                np.zeros(len(codes), np.int64), codes, vals, ccode, cats, stats, corr)
