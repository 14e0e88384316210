"""Derived lines per device: the timelines people reason with, as tracks of kind "derived".

For every device plane with activity: Steps, Sections (projected), Framework Ops,
Framework Name Scope, XLA Modules / XLA Ops (compiled programs) and Source code,
named as XProf names them (``trace/keys.py``). Each line is built from the device's
activity in start order: consecutive activities with the same label and step become
one event, an event is cut where the next one on its line starts, and a nested line
never outlasts its parent step. Steps carry per-step launch statistics
(``launch_count``, ``launch_mean_ns``, ``launch_max_ns``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..trace import keys
from ..trace.builder import TraceBuilder
from ..trace.categories import Kind
from ..trace.factorize import factorize
from ..trace.core import Trace
from ..trace.sorting import lexsort, unique
from . import cache
from .intervals import innermost, run_starts
from .projection import LaunchIndex, section_rows
from ..trace import metadata_keys as mkeys

_I64_MAX = np.iinfo(np.int64).max
_SCOPED = re.compile(r"^[\w.\-]+(/[\w.\-]+)+(:[\w.\-]+)?$")
MODULE_STATS = keys.MODULE_STATS
XLA_OP_STATS = (keys.HLO_OP, "long_name")
SOURCE_STATS = (keys.SOURCE, "source_info")


def _runs(start: np.ndarray, end: np.ndarray, label: np.ndarray, step: np.ndarray):
    """Merge consecutive same (label, step) activities; label -1 means 'not on this line'."""
    if not len(start):
        z = np.zeros(0, np.int64)
        return z, z, z, z
    b = run_starts(label, step)
    s = start[b]
    e = np.maximum.reduceat(end, b)
    nxt = np.append(s[1:], _I64_MAX)
    e = np.minimum(e, nxt)
    keep = label[b] >= 0
    return s[keep], e[keep], label[b][keep], step[b][keep]


def _stat_labels(trace: Trace, rows: np.ndarray, names: tuple[str, ...]) -> np.ndarray | None:
    """String label per row from the first stat in ``names`` that any row carries (None otherwise)."""
    out = np.full(len(rows), None, object)
    found = False
    for key in names:
        col = trace.stats.get(key)
        if col is None:
            continue
        m, v = col.lookup(rows)
        free = m & (out == None)  # noqa: E711
        if free.any():
            found = True
            sub = v[(out[m] == None)]  # noqa: E711
            out[free] = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in sub]
    return out if found else None


def _codes(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes (-1 for None) and the unique labels."""
    codes, uniques = factorize(np.asarray(labels, dtype=object))
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


#: the name of a row without one (np.where's other branch)
_NO_NAME = np.array(None, dtype=object)

class _LineWriter:
    def __init__(self, trace: Trace):
        self.trace = trace
        self.b = TraceBuilder(metadata={})
        self.order = 0

    def line(self, plane_name: str, plane_props: dict[str, Any], line: str, start: np.ndarray,
             end: np.ndarray, names: np.ndarray, stats: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]]
             ) -> int:
        if not len(start):
            return 0
        src = self.trace.plane_by_name(plane_name)
        assert src is not None, plane_name  # a derived line is made for a plane of the trace
        pid = self.b.plane(plane_name, src.kind, src.vendor, src.index, src.pid, plane_props)
        self.order += 1
        tr = self.b.track(pid, line, "derived", tid=0, sort_index=-1000 + self.order)
        clean = {k: v for k, v in stats.items() if v is not None}
        self.b.events(tr, names, start, np.maximum(end - start, 0), keys.CAT_DERIVED, stats=clean)
        return len(start)


def _clip_to_steps(s: np.ndarray, e: np.ndarray, st: np.ndarray, step_idx: np.ndarray,
                   step_s: np.ndarray, step_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A nested line never outlasts its parent: keep each event inside its step's span."""
    if not len(step_s):
        return s, e
    ins = st >= 0
    s = s.copy()
    e = e.copy()
    s[ins] = np.maximum(s[ins], step_s[st[ins]])
    e[ins] = np.minimum(e[ins], step_e[st[ins]])
    return s, np.maximum(e, s)


def derive_lines(trace: Trace) -> Trace:
    """A trace holding only the derived lines of ``trace`` (planes named as in it)."""
    corr = cache.correlation(trace)
    steps = cache.steps(trace)
    ev = trace.events
    w = _LineWriter(trace)
    dev = corr.device_rows
    if not len(dev):
        return w.b.build()
    dplane = trace.track_plane[ev["track"][dev]]
    lstart = np.where(corr.launch >= 0, ev["start_ns"][np.maximum(corr.launch, 0)], ev["start_ns"][dev])
    step_of = steps.of(lstart)
    sec_rows = section_rows(trace)
    # source: stat on the activity or its launch, else the innermost python function around the launch
    src_label = _source_labels(trace, corr)
    ops_name = np.where(corr.op >= 0, trace.names(np.maximum(corr.op, 0)), _NO_NAME)
    counts: dict[str, int] = {}
    for plane in unique(dplane):
        p = trace.planes[plane]
        existing = {t.name for t in trace.tracks_of(int(plane))}
        sel = np.flatnonzero(dplane == plane)
        sel = sel[np.argsort(ev["start_ns"][dev[sel]], kind="stable")]
        rows = dev[sel]
        st = ev["start_ns"][rows]
        en = st + ev["dur_ns"][rows]
        stp = step_of[sel]
        # Steps
        step_s = np.zeros(0, np.int64)
        step_e = np.zeros(0, np.int64)
        if len(steps) and keys.LINE_STEPS not in existing:
            step_s = np.full(len(steps), _I64_MAX, np.int64)
            step_e = np.full(len(steps), -1, np.int64)
            ins = stp >= 0
            np.minimum.at(step_s, stp[ins], st[ins])
            np.maximum.at(step_e, stp[ins], en[ins])
            has = step_e >= 0
            idx = np.flatnonzero(has)
            nxt = np.append(step_s[idx][1:], _I64_MAX)
            step_e[idx] = np.minimum(step_e[idx], nxt)
            lcount, lmean, lmax = _launch_stats(trace, corr, sel, stp, len(steps))
            n = w.line(p.name, {}, keys.LINE_STEPS, step_s[idx], step_e[idx],
                       np.array([str(int(x)) for x in steps.number[idx]], object),
                       {keys.STEP: steps.number[idx], "launch_count": lcount[idx],
                        "launch_mean_ns": lmean[idx], "launch_max_ns": lmax[idx]})
            counts[keys.LINE_STEPS] = counts.get(keys.LINE_STEPS, 0) + n
            step_s = np.where(has, step_s, 0)
            step_e = np.where(has, step_e, 0)
        step_num = lambda ix: np.where(ix >= 0, steps.number[np.maximum(ix, 0)] if len(steps) else -1, -1)  # noqa: E731

        def emit(line: str, labels: np.ndarray | None, stat_key: str | None = None) -> None:
            if labels is None or line in existing:
                return
            code, uniq = _codes(labels)
            if not (code >= 0).any():
                return
            s, e, lab, sx = _runs(st, en, code, stp)
            s, e = _clip_to_steps(s, e, sx, sx, step_s, step_e)
            names = uniq[lab]
            stats: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]] = {
                keys.STEP: (np.flatnonzero(sx >= 0), step_num(sx)[sx >= 0])}
            if stat_key:
                stats[stat_key] = names
            counts[line] = counts.get(line, 0) + w.line(p.name, {}, line, s, e, names, stats)

        # Sections (projected)
        if len(sec_rows) and keys.LINE_SECTIONS not in existing:
            _sections_line(trace, corr, w, p, int(plane), sec_rows, steps, step_s, step_e, counts)
        emit(keys.LINE_FRAMEWORK_OPS, ops_name[sel] if (corr.op[sel] >= 0).any() else None, keys.OP)
        _name_scope_lines(trace, w, p, rows, st, en, stp, ops_name[sel], step_s, step_e, existing, counts,
                          steps.number)
        emit(keys.LINE_XLA_MODULES, _stat_labels(trace, rows, MODULE_STATS), keys.MODULE)
        emit(keys.LINE_XLA_OPS, _stat_labels(trace, rows, XLA_OP_STATS), keys.HLO_OP)
        emit(keys.LINE_SOURCE, src_label[sel] if src_label is not None else None, keys.SOURCE)
    out = w.b.build()
    out.metadata[mkeys.DERIVED_LINES] = counts
    return out


def _launch_stats(trace: Trace, corr, sel: np.ndarray, stp: np.ndarray, n_steps: int):
    """Per step: count, mean and max duration of the distinct launches of this device's work."""
    ev = trace.events
    count = np.zeros(n_steps, np.int64)
    mean = np.zeros(n_steps, np.float64)
    mx = np.zeros(n_steps, np.int64)
    lr = corr.launch[sel]
    ok = (lr >= 0) & (stp >= 0)
    if not ok.any():
        return count, mean, mx
    pairs = np.unique(np.stack([stp[ok], lr[ok]], axis=1), axis=0)
    s, r = pairs[:, 0], pairs[:, 1]
    d = ev["dur_ns"][r]
    count = np.bincount(s, minlength=n_steps).astype(np.int64)
    tot = np.bincount(s, weights=d, minlength=n_steps)
    mean = np.where(count > 0, tot / np.maximum(count, 1), 0.0)
    np.maximum.at(mx, s, d)
    return count, mean, mx


def _sections_line(trace, corr, w, p, plane, sec_rows, steps, step_s, step_e, counts) -> None:
    ev = trace.events
    idx = LaunchIndex(trace, corr, plane, sections=sec_rows)
    if not len(idx):
        return
    s0 = ev["start_ns"][sec_rows]
    proj = idx.project(cache.threads(trace)[ev["track"][sec_rows]], s0, s0 + ev["dur_ns"][sec_rows])
    ok = proj.count > 0
    if not ok.any():
        return
    rows = sec_rows[ok]
    s, e = proj.first_ns[ok], proj.last_ns[ok]
    stp = steps.of(ev["start_ns"][rows])
    # nesting depth on the host, so merging only joins siblings
    order = lexsort((-(e - s), s))
    rows, s, e, stp = rows[order], s[order], e[order], stp[order]
    name = ev["name"][rows].astype(np.int64)
    b = run_starts(name, stp)
    ms, me = s[b], np.maximum.reduceat(e, b)
    mrows, mstp = rows[b], stp[b]
    ms, me = _clip_to_steps(ms, me, mstp, mstp, step_s, step_e)
    names = trace.names(mrows)
    num = np.where(mstp >= 0, steps.number[np.maximum(mstp, 0)] if len(steps) else -1, -1)
    stats = {keys.STEP: (np.flatnonzero(mstp >= 0), num[mstp >= 0]), keys.SECTION: names}
    counts[keys.LINE_SECTIONS] = counts.get(keys.LINE_SECTIONS, 0) + w.line(
        p.name, {}, keys.LINE_SECTIONS, ms, me, names, stats)


def _scope_parts(label: str) -> list[str]:
    parts = label.split(":")[0].split("/")
    return parts[:-1]


def _name_scope_lines(trace, w, p, rows, st, en, stp, op_names, step_s, step_e, existing, counts,
                      steps_number: np.ndarray) -> None:
    """Framework Name Scope: one nesting level per scope depth, all on one line."""
    if keys.LINE_NAME_SCOPE in existing:
        return
    scoped = _stat_labels(trace, rows, (keys.NAME_SCOPE, "tf_op", keys.OP))
    cand = np.where(scoped != None, scoped, op_names) if scoped is not None else op_names  # noqa: E711
    cand = np.where(cand != None, cand, trace.names(rows))  # noqa: E711
    code, uniq = _codes(cand)
    parts = [(_scope_parts(u) if _SCOPED.match(u) else []) for u in uniq]
    if scoped is not None:
        smask = np.array([s is not None for s in scoped])
        # an explicit name_scope stat is all scopes (no op name at its end)
        for i in unique(code[smask]):
            parts[i] = [x for x in str(uniq[i]).split("/") if x]
    depth = max((len(x) for x in parts), default=0)
    if not depth:
        return
    all_s, all_e, all_n, all_st, all_path = [], [], [], [], []
    for k in range(depth):
        prefix = np.array(["/".join(x[:k + 1]) if len(x) > k else None for x in parts], object)
        lab = prefix[code]
        c, u = _codes(lab)
        s, e, l, sx = _runs(st, en, c, stp)
        s, e = _clip_to_steps(s, e, sx, sx, step_s, step_e)
        all_s.append(s)
        all_e.append(e)
        all_n.append(np.array([x.rsplit("/", 1)[-1] for x in u[l]], object))
        all_path.append(u[l])
        all_st.append(sx)
    s = np.concatenate(all_s)
    e = np.concatenate(all_e)
    names = np.concatenate(all_n)
    sx = np.concatenate(all_st)
    path = np.concatenate(all_path)
    num = np.where(sx >= 0, steps_number[np.maximum(sx, 0)] if len(steps_number) else -1, -1)
    stats = {keys.STEP: (np.flatnonzero(sx >= 0), num[sx >= 0]), keys.NAME_SCOPE: path}
    counts[keys.LINE_NAME_SCOPE] = counts.get(keys.LINE_NAME_SCOPE, 0) + w.line(
        p.name, {}, keys.LINE_NAME_SCOPE, s, e, names, stats)


def _source_labels(trace: Trace, corr) -> np.ndarray | None:
    ev = trace.events
    dev = corr.device_rows
    lab = _stat_labels(trace, dev, SOURCE_STATS)
    has = corr.launch >= 0
    if has.any():
        via_launch = _stat_labels(trace, corr.launch[has], SOURCE_STATS)
        if via_launch is not None:
            lab = lab if lab is not None else np.full(len(dev), None, object)
            sub = lab[has]
            sub[sub == None] = via_launch[sub == None]  # noqa: E711
            lab[has] = sub
    py = trace.rows_of_kind(Kind.PYTHON)
    if len(py) and has.any():
        lab = lab if lab is not None else np.full(len(dev), None, object)
        lrow = corr.launch[has]
        th = cache.threads(trace)
        hit = innermost(th[ev["track"][py]], ev["start_ns"][py], ev["start_ns"][py] + ev["dur_ns"][py],
                        th[ev["track"][lrow]], ev["start_ns"][lrow])
        names = np.where(hit >= 0, trace.names(py[np.maximum(hit, 0)]), _NO_NAME)
        sub = lab[has]
        sub[sub == None] = names[sub == None]  # noqa: E711
        lab[has] = sub
    if lab is None or not (lab != None).any():  # noqa: E711
        return None
    return lab
