"""What XProf's and JAX's conventions mean, applied to a Trace just read: the wall-clock
anchor, XProf's flow stats as flows, and the categories of host TraceMe events (steps,
Python calls, CPU-backend HLO ops and their completion marks). polyprof's keys for
XProf's stat names: ``deferred``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.factorize import factorize
from ...trace.sorting import find, last_at_or_before, unique_inverse
from ...trace.stats import StatColumn
from .names import CAT_TRACEME
from ...trace import metadata_keys as mkeys

_FLOW_ID_MASK = (1 << 56) - 1

#: XLA's CPU runtime (``ThunkExecutor::TracedExecute``) marks the moment each thunk's
#: execution completes with a TraceMe named ``end: <op>``, a consumer of the op's own
#: TraceMe (its ``_c`` is the op event's ``_p``, which XProf draws as a flow): a mark
#: of that op, not a framework op. Its category (kind OTHER: not an op, not activity).
CAT_OP_END = "xla_op_end"
_OP_END_PREFIX = "end: "


def wall_anchor(trace: Trace, task_env: dict[str, Any]) -> None:
    """Link the file's times to wall-clock time where the file says how.

    JAX/TSL (and XProf) store times relative to the profile start, whose wall-clock
    time is the ``profile_start_time`` stat of the "Task Environment" plane; older
    writers store absolute wall-clock ns. Anything else is left unanchored.
    """
    start, _ = trace.span_ns
    wall0 = task_env.get("profile_start_time")
    if trace.n_events and wall0 and 0 <= start < 10**15:  # relative times (< ~11 days)
        trace.metadata[mkeys.SOURCE_WALL_ANCHOR] = {"mono_ns": 0, "wall_ns": int(wall0), "uncertainty_ns": 0}
        trace.metadata[mkeys.CLOCK_NAME] = "xspace (ns since profile_start_time)"
    elif trace.n_events and start > 10**18:  # absolute wall-clock ns
        trace.metadata[mkeys.SOURCE_WALL_ANCHOR] = {"mono_ns": 0, "wall_ns": 0, "uncertainty_ns": 0}
        trace.metadata[mkeys.CLOCK_NAME] = "xspace (wall-clock ns)"


def xprof_flows(trace: Trace) -> None:
    """Flows from XProf's "flow" stats (direction in bits 0-1, a 56-bit flow id in bits
    2-57, a context type in bits 58-63): the events sharing a flow id, in time order,
    linked one to the next (category ``xflow`` or ``xflow:<context type>``). XProf
    itself links GPU launches to kernels by correlation id, which stays a stat here."""
    col = trace.stats.get("flow")
    if col is None or col.kind not in "iu" or len(col) < 2:
        return
    vals = col.values.astype(np.uint64)
    ids = (vals >> np.uint64(2)) & np.uint64(_FLOW_ID_MASK)
    cats = (vals >> np.uint64(58)).astype(np.int64)
    order = np.lexsort((trace.start_ns[col.rows], ids))
    rows, ids, cats = col.rows[order], ids[order], cats[order]
    link = np.flatnonzero(ids[1:] == ids[:-1])
    if not len(link):
        return
    cats = cats[link]
    uniq, inv = unique_inverse(cats)
    table = []
    for c in uniq.tolist():
        nm = "xflow" if c == 0 else f"xflow:{c}"
        table.append(trace.intern(nm))
    cat_ids = np.asarray(table, np.int32)[inv.reshape(-1)]
    fl = trace.flows
    trace.flows = {
        "src": np.concatenate([fl["src"], rows[link]]).astype(np.int64),
        "dst": np.concatenate([fl["dst"], rows[link + 1]]).astype(np.int64),
        "id": np.concatenate([fl["id"], ids[link].astype(np.int64)]),
        "category": np.concatenate([fl["category"], cat_ids]),
    }


def classify_host_events(trace: Trace, has_devices: bool) -> None:
    """Host TraceMe events carrying a step number are steps; ``$``-names are Python calls.
    Without device planes (XLA's CPU backend) the host events naming an HLO op are the
    ops' execution: the device activity of that profile."""
    if not trace.n_events:
        return
    cat = trace.events["category"]
    tr_id, ended = trace.string_id(CAT_TRACEME), trace.string_id(CAT_OP_END)
    if tr_id < 0 and ended < 0:
        return
    is_tr = cat == tr_id  # (all False without one: ids are >= 0)
    step = trace.stats.get(keys.STEP)
    sid = trace.intern
    if step is not None and len(step):
        rows = step.rows[is_tr[step.rows]]
        if len(rows):
            cat[rows] = sid(keys.CAT_STEP)
    hlo = trace.stats.get(keys.HLO_OP)
    if not has_devices and hlo is not None and len(hlo):
        rows = hlo.rows[is_tr[hlo.rows]]
        if len(rows):
            cat[rows] = sid("xla_op")
    names = trace.strings
    # (and the marks a file polyprof wrote says are: their modules again)
    end_rows, op_rows = _op_end_rows(trace, is_tr | (cat == ended) if ended >= 0 else is_tr, hlo)
    if len(end_rows):
        cat[end_rows] = sid(CAT_OP_END)
        _op_modules(trace, end_rows, op_rows)
    py_names = np.fromiter((n.startswith("$") for n in names), bool, len(names))
    py_rows = np.flatnonzero(is_tr & py_names[trace.events["name"]])
    if len(py_rows):
        cat[py_rows] = sid("python_function")
    trace.__dict__.pop("kinds", None)  # (made from the categories)


def _op_end_rows(trace: Trace, is_tr: np.ndarray, hlo: Any) -> tuple[np.ndarray, np.ndarray]:
    """(TraceMe rows named ``end: <op>`` that end an XLA op of the trace, the op's row
    each, -1 where not known): the consumer of an HLO op event's context (``_c`` = its
    ``_p``, of the same type: ``_ct`` = ``_pt``), or, where the context does not tell,
    named after an op of the trace (``hlo_op``; its row: the last op of that name that
    began on the mark's thread before it, as XLA's runtime marks the op it ran there)."""
    names = trace.strings
    is_end = np.fromiter((n.startswith(_OP_END_PREFIX) for n in names), bool, len(names))
    none = np.zeros(0, np.int64)
    if hlo is None or not len(hlo) or not is_end.any():
        return none, none
    rows = np.flatnonzero(is_tr & is_end[trace.events["name"]])
    if not len(rows):
        return none, none
    op = np.full(len(rows), -1, np.int64)
    cons = _context(trace, rows, "_c", "_ct")
    prod = _context(trace, hlo.rows, "_p", "_pt")
    if cons is not None and prod is not None:
        at = find(prod[1], cons[1])
        hit = at >= 0
        op[cons[0][hit]] = hlo.rows[prod[0][at[hit]]]
    ok = op >= 0
    if not ok.all() and hlo.kind == "O":  # by the op's name
        rest = np.flatnonzero(~ok)
        ok[rest], op[rest] = _by_name(trace, rows[rest], hlo)
    return rows[ok], op[ok]


def _by_name(trace: Trace, rows: np.ndarray, hlo: Any) -> tuple[np.ndarray, np.ndarray]:
    """(whether each ``end: <op>`` row names an op of the trace, in any module; the row
    of the last op of that name that began on its track at or before it, else on any
    track of its plane (XLA's CPU runtime writes the mark on the Eigen worker thread
    that finished the op, the op on the PjRt thread), -1 where none)."""
    ev = trace.events
    op_code, op_names = factorize(np.asarray(hlo.values, object))
    index = {str(v): i for i, v in enumerate(op_names.tolist())}
    ids, inv = unique_inverse(ev["name"][rows])
    code = np.array([index.get(trace.strings[i][len(_OP_END_PREFIX):], -1) for i in ids.tolist()],  # (per name)
                    np.int64)[inv.reshape(-1)]
    n = len(op_names) + 1  # (a key per (track, op name); -1, no op, never one of them)
    found = last_at_or_before(ev["track"][hlo.rows].astype(np.int64) * n + op_code, ev["start_ns"][hlo.rows],
                              hlo.rows, ev["track"][rows].astype(np.int64) * n + code, ev["start_ns"][rows])
    ok = code >= 0
    miss = np.flatnonzero(ok & (found < 0))
    if len(miss):  # XLA's CPU runtime marks the end on the worker thread that finished the op: its process's
        plane = np.asarray(trace.track_plane, np.int64)
        found[miss] = last_at_or_before(plane[ev["track"][hlo.rows]] * n + op_code, ev["start_ns"][hlo.rows],
                                        hlo.rows, plane[ev["track"][rows[miss]]] * n + code[miss],
                                        ev["start_ns"][rows[miss]])
    return ok, np.where(ok, found, -1)


def _op_modules(trace: Trace, rows: np.ndarray, ops: np.ndarray) -> None:
    """Give each ``end: <op>`` mark of ``rows`` the module of the op it ends (``ops``: its
    ``hlo_module``) as polyprof's ``module`` stat, where it has none: XLA names ops
    uniquely within a module only, and the tables name an event of a module
    ``module/name`` (``analyze.common.qualified_names``), so ``end: ynn_fusion`` of two
    jitted functions is a row of each. (polyprof's key, as the reader gives every op
    ``module`` beside XProf's ``hlo_module``: XProf's own stats stay as the file has them,
    and a file polyprof writes leaves the copy out.)"""
    hlo = trace.stats.loaded().get(keys.HLO_MODULE)
    if hlo is None or hlo.kind != "O" or not len(hlo):
        return
    known = ops >= 0
    has, mods = hlo.lookup(ops[known])
    rows, mods = rows[known][has], np.asarray(mods, object)
    col = trace.stats.get(keys.MODULE)  # (XProf's hlo_module under polyprof's key: decoded here)
    if col is not None and col.kind != "O":  # (a file's own numeric "module": not a module's name)
        return
    if col is not None:
        own, _ = col.lookup(rows)
        rows, mods = rows[~own], mods[~own]
    if not len(rows):
        return
    old_rows = col.rows if col is not None else np.zeros(0, np.int64)
    old_vals = np.asarray(col.values, object) if col is not None else np.zeros(0, object)
    all_rows = np.concatenate([old_rows, rows])
    order = np.argsort(all_rows, kind="stable")
    trace.stats.put(keys.MODULE, StatColumn(all_rows[order], np.concatenate([old_vals, mods])[order]))


def _context(trace: Trace, rows: np.ndarray, id_key: str, type_key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions in ``rows``, their (type, id) pairs as one comparable value) of the rows
    carrying a TraceMe producer or consumer context (``_p``/``_pt``, ``_c``/``_ct``)."""
    ids, types = trace.stats.get(id_key), trace.stats.get(type_key)
    if ids is None or types is None or ids.kind not in "iu" or types.kind not in "iu":
        return None
    has_id, idv = ids.lookup(rows)
    has_type, tv = types.lookup(rows)
    both = has_id & has_type
    pos = np.flatnonzero(both)
    idv = idv[both[has_id]].astype(np.int64)
    tv = tv[both[has_type]].astype(np.int64)
    pairs = np.ascontiguousarray(np.stack([tv, idv], 1)).view(np.dtype((np.void, 16))).reshape(-1)
    return pos, pairs
