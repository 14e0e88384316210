"""Slices of parsed events -> NumPy columns (the parser stage, one slice at a time).

Events (``X``/``i``/``I``/``B``) become columns of codes and ns; their args are buffered
as JSON text and, every 8192 events, checked, their ids typed (``ids.py``) and the rest
kept for the deferred decode (``deferred.py``). Flow endpoints become columns
(``flows.py``); counters, metadata and ``E`` events, which are few, are kept one by one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgspec
import numpy as np
import orjson

from .. import kineto_memory
from ...errors import TraceFormatError
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from . import gather
# _ARG_FLUSH_EVENTS: tokenized.py reads it from here
from .args import _ARG_FLUSH_EVENTS, _EAGER_KEYS, ArgsPiece, _big_numbers, _typed_stat, arg_batches  # noqa: F401
from .build import build_trace
from .codes import _codes, _id_code, same_id
from .events import (BLANK, _ASYNC_PHASES, _B, _C, _DECODE_ANY, _E, _F, _M, _NO_ARGS, _NULL, _OTHER, _PHASE_CODES,
                     _PHASES, _S, _X, _Event)
from . import asyncs, lenient
from .flows import add_flow_slice, add_v2_slice
from .ids import fast_ids, id_columns, id_groups
from .numbers import NotANumber, _ns_of, _times
from .packed import PackedBatches
from .progress import _Progress
from .taken import TakenArgs

#: an object in ``traceEvents`` with no field the reader reads (``{}``: events.BLANK)
_EMPTY = _Event()

if TYPE_CHECKING:
    from .tokenized import Tokenizer

class _Collector:
    """Turns slices of parsed events into columns; builds the Trace at the end."""

    def __init__(self, path: Path):
        self.path = path
        self.b = TraceBuilder()
        self.strings: dict[Any, int] = {}
        self.pids: dict[Any, int] = {}  # pid/tid value -> code ("7" and 7 share one: same_id)
        self.tids: dict[Any, int] = {}
        self.id_values: dict[int, list] = {id(self.pids): [], id(self.tids): []}  # code -> value
        self.n = 0  # event rows so far
        self.seen = 0  # trace events so far (all phases)
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("pid", "tid", "name", "cat", "ts", "dur")}
        self.b_rows: list[np.ndarray] = []
        self.b_pos: list[np.ndarray] = []  # the B rows' places among the trace's events (as E's pos)
        self.ends: list[tuple] = []  # E events: (pid, tid, ts, pos, args)
        self.flow_cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("cat", "id", "ph", "pid", "tid", "ts", "enclosing")}
        self.flow_names: dict[bytes, int] = {}  # flow ids that are not integers
        self.counters: list[tuple] = []  # (pid code, name, ts_ns, value)
        self.arg_raws: list[msgspec.Raw | ArgsPiece] = []  # args (JSON text) of the events from row arg_base
        self.arg_base = 0
        self.arg_batches = PackedBatches()  # (first row, "[args, ...]"): typed on first use (packed.py)
        self.late_args: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # of E events, idem
        self.process: dict[Any, dict[str, Any]] = {}
        #: the device label of a pid also labelled "CPU": Kineto labels pids 0-15 "GPU N"
        #: whatever they are, so a host process of a small pid (1 in a container) gets both;
        #: its ``process_labels`` stay "CPU" (devices.py reads which it is from its events)
        self.device_label: dict[Any, str] = {}
        self.threads: dict[tuple, dict[str, Any]] = {}
        self.other_meta: list[dict] = []
        self.skipped: dict[str, int] = {}
        self.unbound_flows = 0  # flow endpoints bound to no event (flows.py)
        self.unended = 0  # B and b events never closed: they end with the trace (build.py, asyncs.py)
        self.backwards = 0  # X events of a negative dur (damage): 0 ns long, said (build._metadata)
        self.lazy_args: tuple[Callable[[], list[str]], int] | None = None  # add_columns' args, made on first use
        self.lost_args = 0  # events whose args (from add_columns) were not valid JSON
        self.dropped = lenient.Dropped()  # what was left out, by reason: one warning line
        self.asyncs: list[tuple] = []  # b/e/n events (asyncs.py)
        self.flow_v2: list[tuple] = []  # slices with bind_id and flow_in/flow_out (flows.py)
        self.tok: Tokenizer | None = None  # the compiled tokenizer's tables (tokenized.py), if in use
        self.taken: TakenArgs | None = None  # the args it took by name (taken.py), at the end
        self.untaken = False  # some events were read otherwise: their args not taken

    def _sid(self, v: Any) -> int:
        return self.b.intern(v if isinstance(v, str) else ("" if v is None else str(v)))

    def _new_code(self, table: dict) -> Callable[[Any], int]:
        values = self.id_values.get(id(table))
        if values is None:
            return lambda v: len(table)
        return lambda v: _id_code(table, values, v)

    # ---------------------------------------------------------------- one slice
    def add(self, evs: list[_Event]) -> None:
        n = len(evs)
        codes = gather.codes(evs, "ph", _PHASE_CODES, np.int8)
        if codes is None:  # other or unhashable "ph" values; "XXX" is X (its first letter)
            codes = np.array([_PHASES.get(lenient.phase(p), _OTHER) if type(p) is str else _OTHER
                              for p in (e.ph for e in evs)], dtype=np.int8)
        try:
            ts_ns, unset = _times(gather.values(evs, "ts"), self.path, "ts")
            if unset is not None:  # events without a ts (damage): dropped, metadata kept
                evs, codes, ts_ns = self.timed(evs, codes, ts_ns, unset)
        except NotANumber:  # a ts that is not a number: that event is dropped (metadata kept)
            evs, codes, ts_ns = self._valid_times(evs, codes)
        self.seen += n - len(evs)
        n = len(evs)

        ev_idx = np.flatnonzero(codes <= _B)
        b = ev_idx[codes[ev_idx] == _B]
        if len(b):
            self.b_pos.append(self.seen + b)
        if len(ev_idx):
            self._events(evs if len(ev_idx) == n else [evs[i] for i in ev_idx.tolist()],
                         codes[ev_idx], ts_ns[ev_idx])
        rare = np.flatnonzero(codes > _B)
        if len(rare):
            self._rare(evs, rare, codes, ts_ns)
        self.seen += n

    def timed(self, evs: list[_Event], codes: np.ndarray, ts_ns: np.ndarray, unset: np.ndarray
              ) -> tuple[list[_Event], np.ndarray, np.ndarray]:
        """The events that have a ``ts`` (``unset``: those that have none, or null), are
        metadata (which need none: read as 0) or are of a phase not read, with their
        phase codes and times; the others counted as dropped. Before, they were read at
        time 0: one damaged byte (``"{s"`` for ``"ts"``) in a trace of 1M events made
        its span 5,143,946 s."""
        keep = ~unset | (codes == _M) | (codes == _OTHER)  # phases not read are counted as skipped (_rare)
        if keep.all():
            return evs, codes, ts_ns
        self.dropped.add(lenient.NO_TS, int(len(keep) - keep.sum()))
        return [evs[i] for i in np.flatnonzero(keep).tolist()], codes[keep], ts_ns[keep]

    def _valid_times(self, evs: list[_Event], codes: np.ndarray) -> tuple[list[_Event], np.ndarray, np.ndarray]:
        """The events whose ``ts`` is a number (metadata events: any ``ts``, read as 0),
        their phase codes and times; the others counted as dropped."""
        keep, times = [], []
        for i, e in enumerate(evs):
            try:
                ns, unset = _times([e.ts], self.path, "ts")
                if unset is not None and codes[i] != _M and codes[i] != _OTHER:
                    self.dropped.add(lenient.NO_TS)
                    continue
                times.append(int(ns[0]))
            except NotANumber as bad:
                if codes[i] != _M:
                    self.dropped.add(f"events whose ts is {bad.dropped_as}")
                    continue
                e.ts = _NULL
                times.append(0)
            keep.append(i)
        return [evs[i] for i in keep], codes[keep], np.asarray(times, np.int64)

    def add_columns(self, pid: np.ndarray, tid: np.ndarray, name: list[str], cat: list[str], ts_ns: np.ndarray,
                    dur_ns: np.ndarray, args: list[str] | Callable[[], list[str]]) -> None:
        """Events (``X``, or ``i`` with ``dur_ns`` 0) given as columns by a producer that
        holds them in memory, not as JSON text (torch's results, plugins/torch/activities.py):
        integer pids and tids, names and categories as str, times in ns, each event's args
        as the text inside its JSON object (``"k": v, ...``; "" for none), or a function that
        gives them on first use (then no arg is typed at load: the producer adds the ids,
        and its events have no memory args). The same columns, codes and args batches
        :meth:`add` makes of the same events written as JSON; args that are not valid JSON
        are left out (counted)."""
        if self.n or self.lazy_args is not None:
            raise ValueError("add_columns: the events given as columns must be the only ones")
        self._flush_args()
        self.untaken = True
        c = self.cols
        for key, ints, table in (("pid", pid, self.pids), ("tid", tid, self.tids)):
            uniq, inverse = np.unique(np.asarray(ints, np.int64), return_inverse=True)
            c[key].append(np.array(self._id_codes(uniq.tolist(), table), np.int64)[inverse])
        for key, strs in (("name", name), ("cat", cat)):
            distinct = list(dict.fromkeys(strs))
            code = dict(zip(distinct, _codes(distinct, self.strings, self._sid)))
            c[key].append(np.fromiter(map(code.__getitem__, strs), np.int32, len(strs)))
        c["ts"].append(np.asarray(ts_ns, np.int64))
        c["dur"].append(self.forward(np.asarray(dur_ns, np.int64)))
        if callable(args):  # made on first use: nothing typed at load
            self.lazy_args = (args, self.n)
        else:
            batches, self.lost_args = arg_batches(args, self.n)
            for first, text in batches:
                self._arg_batch(text, first)
        self.n += len(ts_ns)
        self.seen += len(ts_ns)
        self.arg_base = self.n

    def forward(self, dur: np.ndarray) -> np.ndarray:
        """``dur`` with each negative duration (an event that ends before it starts: a
        damaged file) made 0, counted in ``backwards``: never silently. A new array."""
        self.backwards += int(np.count_nonzero(dur < 0))
        return np.maximum(dur, 0)

    def field_codes(self, sel: list[_Event], field: str, dtype: Any) -> np.ndarray:
        """The codes of one field of events: ``pid``/``tid`` through their tables, ``name``/
        ``cat`` as string ids. One pass over the parsed structs (gather.py) looks up the
        known values (nearly all after the first slice); new ones are numbered here."""
        if field in ("pid", "tid"):
            table = self.pids if field == "pid" else self.tids
            got = gather.codes(sel, field, table, dtype)
            return self._id_codes(gather.values(sel, field), table).astype(dtype, copy=False) if got is None else got
        got = gather.codes(sel, field, self.strings, dtype)
        return np.array(_codes(gather.values(sel, field), self.strings, self._sid), dtype) if got is None else got

    def _id_codes(self, values: list, table: dict) -> np.ndarray:
        """Codes of pid/tid values (ints or strings)."""
        return np.array(_codes(values, table, self._new_code(table)), np.int64)

    def _events(self, sel: list[_Event], ev_codes: np.ndarray, ts_ns: np.ndarray) -> None:
        x = ev_codes == _X
        try:
            if x.all():
                dur = _ns_of(gather.values(sel, "dur"), self.path, "dur")
            else:  # only X events have a duration (B: from its E)
                dur = np.zeros(len(sel), np.int64)
                rows = np.flatnonzero(x)
                dur[rows] = _ns_of([sel[i].dur for i in rows.tolist()], self.path, "dur")
        except NotANumber:  # a dur that is not a number: that event is dropped
            sel, ev_codes, ts_ns, dur = self._valid_durations(sel, ev_codes, ts_ns)
            if not len(sel):
                return
        self.untaken = True  # events not read by the tokenizer: their args are not taken
        c = self.cols
        c["pid"].append(self.field_codes(sel, "pid", np.int64))
        c["tid"].append(self.field_codes(sel, "tid", np.int64))
        c["name"].append(self.field_codes(sel, "name", np.int32))
        c["cat"].append(self.field_codes(sel, "cat", np.int32))
        c["ts"].append(ts_ns)
        c["dur"].append(self.forward(dur))
        base = self.n
        add_v2_slice(self, sel, base)
        if np.any(ev_codes == _B):
            self.b_rows.append(np.flatnonzero(ev_codes == _B) + base)
        self.arg_raws += gather.values(sel, "args")
        self.n += len(sel)
        if self.n - self.arg_base >= _ARG_FLUSH_EVENTS:  # arg_raws: one Raw per event, or many (tokenized.py)
            self._flush_args()

    def _valid_durations(self, sel: list[_Event], ev_codes: np.ndarray, ts_ns: np.ndarray
                         ) -> tuple[list[_Event], np.ndarray, np.ndarray, np.ndarray]:
        """The events whose X ``dur`` is a number, with their codes, times and durations;
        the others counted as dropped."""
        keep, durs = [], []
        for i, e in enumerate(sel):
            d = 0
            if ev_codes[i] == _X:
                try:
                    d = int(_ns_of([e.dur], self.path, "dur")[0])
                except NotANumber as bad:
                    self.dropped.add(f"X events whose dur is {bad.dropped_as}")
                    continue
            keep.append(i)
            durs.append(d)
        return [sel[i] for i in keep], ev_codes[keep], ts_ns[keep], np.asarray(durs, np.int64)

    def _flush_args(self) -> None:
        """The buffered args as one JSON text: checked, the eager args typed, the rest kept.

        Msgspec skipped over the args unchecked for UTF-8 and number range, which decoding
        them checks: so that their decode on first use cannot fail, such text fails here.
        The compiled tokenizer's pieces say what it found (``ArgsPiece``): the checks it
        made are not made again.
        """
        raws, base = self.arg_raws, self.arg_base
        self.arg_raws, self.arg_base = [], self.n
        if not raws:
            return
        pieces = [r for r in raws if type(r) is ArgsPiece]
        compiled = len(pieces) == len(raws)  # every event's args from the tokenizer
        if compiled and all(p.ids is not None and not p.risky and not p.memory for p in pieces):
            return self._plain_batch(pieces, base)
        parts: list[bytes | msgspec.Raw] = [r.text if isinstance(r, ArgsPiece) else r for r in raws]
        parts[0] = b"[" + parts[0]
        parts[-1] = bytes(parts[-1]) + b"]"
        text = b",".join(parts)
        del raws, parts
        if not compiled:
            return self._arg_batch(text, base)
        ids = None
        if all(p.ids is not None for p in pieces):
            ids = [np.concatenate([p.ids[k] for p in pieces]) for k in (0, 1)]  # type: ignore[index]
        found = [p.names for p in pieces if p.names is not None]
        names = frozenset().union(*found) if len(found) == len(pieces) else None  # None: some piece could not tell
        self._arg_batch(text, base, (any(p.risky for p in pieces), any(p.memory for p in pieces), ids), names)

    def _plain_batch(self, pieces: list[ArgsPiece], base: int) -> None:
        """A batch all read by the tokenizer, with nothing to check (no number out of msgspec's
        range, no memory event) and its ids as columns: the ids typed, the pieces' texts
        kept (packed.py) without joining them first."""
        ids = [np.concatenate([p.ids[k] for p in pieces]) for k in (0, 1)]  # type: ignore[index]
        for key, rows, vals in id_columns(ids[0], ids[1], base):
            self.b.add_stat(key, rows, vals)
        found = [p.names for p in pieces if p.names is not None]
        names = frozenset().union(*found) if len(found) == len(pieces) else None  # None: some piece could not tell
        self.arg_batches.append_parts(base, [p.text for p in pieces], names)

    def _arg_batch(self, text: bytes, base: int, found: tuple[bool, bool, list[np.ndarray] | None] | None = None,
                   names: frozenset[str] | None = None) -> None:
        """One batch of args (``[args, ...]`` from row ``base``): checked, ids and memory
        stats typed, the rest kept as text. ``found``: what the compiled tokenizer found
        in all of it (risky numbers, memory markers, the ids' columns or None), the UTF-8
        checked."""
        if found is None and not text.isascii():
            try:
                text.decode()
            except UnicodeDecodeError:
                self._decode_args(text)  # raises, naming the file
        if (found is None or found[0]) and _big_numbers(text):
            self._decode_args(text)
        if found is not None and found[2] is not None:
            for key, rows, vals in id_columns(found[2][0], found[2][1], base):
                self.b.add_stat(key, rows, vals)
        else:
            self._eager_args(text, base)
        if (found is None or found[1]) and kineto_memory.has_memory(text):
            for key, (rows, typed) in kineto_memory.batch_stats(text, base, _DECODE_ANY).items():
                self.b.add_stat(key, rows, typed)
        self.arg_batches.append((base, text), names)

    def _eager_args(self, text: bytes, base: int) -> None:
        """Type the id args (``ids.py``) of one batch (``[args, ...]`` from row ``base``)."""
        fast = fast_ids(text, base)
        if fast is not None:
            for key, rows, vals in fast:
                self.b.add_stat(key, rows, vals)
            return
        for name, (g_rows, g_vals) in id_groups(text, base).items():
            self._add_stat(name, np.array(g_rows, np.int64), g_vals)

    def _add_stat(self, name: str, rows: np.ndarray, vals: list) -> None:
        key, rows, arr = _typed_stat(name, rows, vals)
        if not len(rows):
            return
        if key in _EAGER_KEYS or key in kineto_memory.MEMORY_KEYS:
            self.b.add_stat(key, rows, arr)
        else:
            self.late_args.setdefault(key, []).append((rows, arr))

    def _rare(self, evs: list[_Event], idx: np.ndarray, codes: np.ndarray, ts_ns: np.ndarray) -> None:
        """Flows (columns), then counters, metadata and E events (few; one by one)."""
        rc = codes[idx]
        with_args = [i for i in idx.tolist() if evs[i].args is not _NO_ARGS]
        args_of = dict(zip(with_args, self._decode_args(b"[" + b",".join([evs[i].args for i in with_args]) + b"]")))
        fl = (rc >= _S) & (rc <= _F)
        if fl.any():
            add_flow_slice(self, [evs[i] for i in idx[fl].tolist()], rc[fl], ts_ns[idx[fl]])
        for i, code in zip(idx[~fl].tolist(), rc[~fl].tolist()):
            e = evs[i]
            if code == _M:
                self._meta(e, args_of.get(i))
            elif code == _E:
                pid = _codes([e.pid], self.pids, self._new_code(self.pids))[0]
                tid = _codes([e.tid], self.tids, self._new_code(self.tids))[0]
                self.ends.append((pid, tid, int(ts_ns[i]), self.seen + i, args_of.get(i)))
            elif code == _C:
                args = args_of.get(i)
                if not isinstance(args, dict):
                    continue
                name = e.name
                name = name if isinstance(name, str) else str(name)
                if e.id is not None:
                    name = f"{name} {e.id}"
                pid = _codes([e.pid], self.pids, self._new_code(self.pids))[0]
                single = len(args) == 1
                for k, v in args.items():
                    value = lenient.number(v)  # a number, or a string that holds one ("0.75")
                    if value is None:
                        self.dropped.add("counter values that are not numbers")
                        continue
                    self.counters.append((pid, name if single else f"{name}.{k}", int(ts_ns[i]), value))
            elif code in _ASYNC_PHASES:
                pid = _codes([e.pid], self.pids, self._new_code(self.pids))[0]
                asyncs.add(self, e, _ASYNC_PHASES[code], pid, int(ts_ns[i]), args_of.get(i))
            else:
                p = e.ph
                # BLANK: no field read (``{}``: JAX's and TensorFlow's end marker; build.py)
                p = BLANK if e == _EMPTY else p if isinstance(p, str) else repr(p)
                self.skipped[p] = self.skipped.get(p, 0) + 1

    def _decode_args(self, text: bytes) -> Any:
        """JSON text of args -> Python values; TraceFormatError (naming the file) if bad."""
        try:
            return _DECODE_ANY(text)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:  # incl. ValidationError: out of range
            raise TraceFormatError(self.path, f"invalid JSON in event args ({e})") from None

    def _meta(self, e: _Event, args: Any) -> None:
        name, args_ = e.name, args or {}
        if not isinstance(args_, dict):
            return
        pid = e.pid
        try:  # kept under both spellings of numeric ids (same_id): events may use the other
            pids = (pid,) if same_id(pid) is None else (pid, same_id(pid))
            if name in ("process_name", "process_labels", "process_sort_index"):
                field = {"process_name": "name", "process_labels": "labels",
                         "process_sort_index": "sort_index"}[name]
                for p in pids:
                    self._process_meta(p, name, args_.get(field))
                return
            if name in ("thread_name", "thread_sort_index"):
                field = "name" if name == "thread_name" else "sort_index"
                tids = (e.tid,) if same_id(e.tid) is None else (e.tid, same_id(e.tid))
                for p in pids:
                    for t in tids:
                        self.threads.setdefault((p, t), {})[name] = args_.get(field)
                return
        except TypeError:  # unhashable pid/tid
            pass
        if len(self.other_meta) < 1000:  # as written, but args as read (null: none)
            try:
                rec = orjson.loads(msgspec.json.encode(e))
            except orjson.JSONDecodeError:  # a number beyond a double: not kept
                return
            rec.pop("args", None)
            if args is not None:
                rec["args"] = args
            self.other_meta.append(rec)

    def _process_meta(self, pid: Any, name: str, value: Any) -> None:
        info = self.process.setdefault(pid, {})
        old = info.get(name)
        if name == "process_labels" and isinstance(value, str) and isinstance(old, str) \
                and (value.strip().upper() == "CPU") != (old.strip().upper() == "CPU"):
            host, device = (value, old) if value.strip().upper() == "CPU" else (old, value)
            self.device_label[pid] = device
            value = host  # (in either order: the host's label stays)
        info[name] = value

    # ---------------------------------------------------------------- the Trace
    def finish(self, top: dict[str, Any], progress: _Progress) -> Trace:
        """The Trace of everything added (``build.py``)."""
        self._flush_args()
        got = self.tok.taken() if self.tok is not None and not self.untaken else None
        self.taken = TakenArgs(*got) if got is not None else None
        return build_trace(self, top, progress)
