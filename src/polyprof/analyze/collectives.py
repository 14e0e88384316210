"""The collectives and point-to-point transfers of one rank, as a small table: what
alignment, stragglers, collective statistics and transfers work from.

A collective is a communication kernel on a device (NCCL, RCCL: ``ncclKernel_*``,
``ncclDevKernel_*``, named as ``analyze.common.activity_class`` calls communication) or,
in a trace without device communication, a CPU collective (``gloo:all_reduce``,
``mpi:*``: the work from its post to its completion, on whichever thread ran it) or an
XLA collective op that XLA's CPU backend ran on a host thread (``all-reduce.2``; an
async one's ``-start`` and its ``-done`` are one collective, from the start's start to the
done's end). On a device an XLA op named so (a TPU's ``all-reduce``) is communication too.
Point-to-point rows (``p2p``: send, recv, NCCL's SendRecv kernels) are transfers, never
collectives, unless a collective op encloses their launch (below): they bind two ranks,
not a group, and have a ``peer`` where the trace says who (``Src Rank`` / ``Dst Rank``,
which recent PyTorch writes with the comms args; for gloo and MPI the peer argument of
the ``c10d::send`` / ``c10d::recv_`` op that posted them, a rank of its process group,
recorded with ``record_shapes``).
Host-side ``nccl:*`` annotations (HCCL's ``hccl:*`` likewise) and ``record_param_comms``
are not used for times: they only enqueue the kernel, so they say nothing about when the
ranks met. They name the
collective, though: NCCL runs an all-to-all (and gather, scatter, uneven all-gathers) as
grouped sends and receives, whose kernel is a SendRecv; a point-to-point row launched
inside a host op that names a collective (``nccl:all_to_all``, ``c10d::alltoall_base_``,
``all_to_all_single``, ``c10d::allgather_into_tensor_coalesced_``, ...; any enclosing
op on the launching thread, not only the innermost) is a collective of that kind
(``group_op``), numbered like the others. For a CPU backend's transfer the op that
posted it (``c10d::send`` / ``c10d::recv_``) is asked, and a rank's several transfers
inside one such op are one collective (from the first one's start to the last one's
end). Sends and receives outside any (``isend``/``irecv``, ``batch_isend_irecv``: a bare
``coalesced`` group names no collective) stay transfers.

Each row gets a ``key`` (process group and operation; gloo's ranges name no group: the
one their worker thread tells, ``process_groups.gloo_groups``, the default group's
keeping the bare op) and ``seq``: the collective's
sequence number in its process group where the trace has one on every collective of the
key (``Seq``, which recent PyTorch writes with the comms args), else its position among
the rank's collectives of that key in time order (the k-th collective of a communicator
is the same collective on every rank); ``seq_from`` says which. Sizes come from the Kineto args
(``In msg nelems`` / ``Out msg nelems`` / ``dtype`` / ``Group size``) where present, else
from the row's input shapes and types (``Input Dims`` / ``Input type``: torch writes them
on ``gloo:*`` ranges with ``record_shapes``). An arg
the kernel lacks is taken from the framework op that launched it (``record_param_comms``,
where PyTorch writes the comms args, ``Seq`` included, when the kernel has fewer).
``root``: a broadcast's, scatter's, reduce's or gather's root rank (``collective_roots.py``;
-1: unknown, or not rooted).
"""

from __future__ import annotations

import re

import numpy as np

from ..derive import cache
from ..derive.intervals import innermost
from ..trace import keys
from ..trace.categories import EP_NAMESPACES
from ..trace.core import Trace
from ..trace.factorize import factorize
from ..trace.sorting import first_and_inverse, member, unique
from ..trace.vocabulary import XLA_COLLECTIVE_OP
from .collective_roots import json_arg, roots
from .common import COMMUNICATION, device_view, frame
from .frames import order_desc
from .gathered_sizes import gathered_bytes, input_bytes
from .inputs import cpu_comm_rows, xla_host_rows
from .process_groups import gloo_groups, group_ranks, known_group_sizes
from .table import Table
from .window import selection
from .window_counting import inside

COLUMNS = ["key", "seq", "seq_from", "op", "pg", "name", "start_ns", "end_ns", "dur_ns", "bytes", "group_size",
           "p2p", "peer", "peer_from", "host", "row", "root"]
#: name prefixes of the CPU backends' work ranges (torch's ProcessGroupGloo / ProcessGroupMPI)
#: the c10d ops that post a point-to-point transfer; their third input is the peer
C10D_P2P = ("c10d::send", "c10d::recv_")

#: element sizes of the dtype names torch writes (``dtype`` arg; Input type names)
DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
               "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1, "char": 1,
               "signed char": 1, "unsigned char": 1, "int8": 1, "uint8": 1, "bool": 1,
               "float8_e4m3fn": 1, "float8_e5m2": 1}

_KERNEL_OP = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_P2P = ("sendrecv", "send", "recv")
#: the collectives an enclosing host op may name for the point-to-point kernels or
#: transfers it launched (NCCL runs these as grouped sends and receives)
GROUP_OPS = frozenset({"alltoall", "alltoallv", "allgather", "reducescatter", "gather", "scatter", "allreduce",
                       "broadcast", "reduce"})
#: prefixes of the host ops that name a collective (torch's backends and c10d's dispatcher ops;
#: ``hccl:`` is the HCCL backends', Habana Gaudi's, Ascend's and MTIA's: a device backend as
#: NCCL is, so its ranges only enqueue and are never a CPU collective's work)
_OP_PREFIXES = ("nccl:", "rccl:", "hccl:", "gloo:", "mpi:", "ucc:", "xccl:", "c10d::")
#: a name without such a prefix counts only for these (torch.distributed's functions)
_BARE_OPS = frozenset({"alltoall", "alltoallv", "allgather", "reducescatter"})


def normalise_op(text: str) -> str:
    """``ncclKernel_AllReduce_RING_LL_Sum_float(...)``, ``allreduce``, ``gloo:all_reduce``,
    ``nccl:_all_gather_base``, XLA's ``all-reduce-start.1`` -> ``allreduce`` / ``allgather``."""
    x = re.match(XLA_COLLECTIVE_OP, text.lower())
    if x:
        return x.group(1).replace("-", "")
    if any(ns in text for ns in EP_NAMESPACES):  # DeepEP's dispatch and combine: an all-to-all
        return "alltoall"
    m = _KERNEL_OP.search(text)
    s = m.group(1) if m else text.split(":", 1)[-1]
    s = s.lower().replace("_", "").replace("-", "")
    for suffix in ("base", "coalesced", "intotensor", "tensor", "single"):
        if s.endswith(suffix) and len(s) > len(suffix):
            s = s[: -len(suffix)]
    return s


#: the Kineto args a collective kernel may carry that the table uses
ARGS = ("Collective name", "Process Group Name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "Seq",
        "Src Rank", "Dst Rank", "Rank", "Process Group Ranks", keys.INPUT_DIMS, keys.INPUT_TYPE)
SHAPE_ARGS = (keys.INPUT_DIMS, keys.INPUT_TYPE)


def _stats(trace: Trace, rows: np.ndarray, keys: tuple[str, ...] = ARGS) -> dict[str, np.ndarray]:
    """Each of ``keys`` for ``rows`` (ascending) as an object array (None where
    absent); deferred args are decoded for these rows only."""
    got = trace.stats.lookup_rows(keys, rows) if len(rows) else {}
    out = {}
    for key in keys:
        col = np.full(len(rows), None, object)
        if key in got:
            m, v = got[key]
            col[m] = list(v)
        out[key] = col
    return out


def _with_op_args(trace: Trace, rows: np.ndarray, st: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``st`` with what a kernel lacks taken from the framework op that launched it
    (``record_param_comms`` carries the comms args, ``Seq`` among them, where a kernel
    may carry none or only some)."""
    # shapes stay the row's own: a launching op's inputs are not the message (an
    # all-gather's output buffer is among them)
    lacking = tuple(k for k, v in st.items() if k not in SHAPE_ARGS and (v == None).any())  # noqa: E711
    if not len(rows) or not lacking:
        return st
    corr = cache.correlation(trace)
    dev = corr.device_rows
    i = np.searchsorted(dev, rows)
    found = i < len(dev)
    found[found] &= dev[i[found]] == rows[found]
    op = np.full(len(rows), -1, np.int64)
    op[found] = corr.op[i[found]]
    has = op >= 0
    if not has.any():
        return st
    uniq, back = np.unique(op[has], return_inverse=True)
    got = _stats(trace, uniq, lacking)
    take = np.flatnonzero(has)
    out = dict(st)
    for key in lacking:
        col = st[key].copy()
        fill = got[key][back]
        use = (col[take] == None) & (fill != None)  # noqa: E711
        col[take[use]] = fill[use]
        out[key] = col
    return out


def _num(values: np.ndarray, missing: int = 0) -> np.ndarray:
    out = np.full(len(values), missing, np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = int(v) if v is not None else missing
        except (TypeError, ValueError, OverflowError):
            pass
    return out


def _sequence(keys: np.ndarray, recorded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seq, seq_from) per row (rows in time order): the recorded ``Seq`` for the keys
    whose every row has one, distinct and increasing; else the order within the key."""
    if not len(keys):
        return np.zeros(0, np.int64), np.zeros(0, object)
    codes = factorize(keys)[0]
    by_key = np.argsort(codes, kind="stable")
    c = codes[by_key]
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    seq = np.empty(len(keys), np.int64)
    seq[by_key] = np.arange(len(c)) - np.repeat(first, np.diff(np.r_[first, len(c)]))
    src = np.full(len(keys), "order", object)
    for k in unique(keys[recorded >= 0]):
        mine = keys == k
        r = recorded[mine]
        if (r >= 0).all() and (np.diff(r) > 0).all():
            seq[mine], src[mine] = r, "Seq"
    return seq, src


def collective_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, start, end) of the rank's collectives and transfers: device communication
    kernels, else the CPU backends' work ranges (gloo, MPI) and XLA's collective ops on
    host threads (:func:`xla_async_spans`)."""
    v = device_view(trace)
    sel = v.cls == COMMUNICATION
    if sel.any():
        return v.rows[sel], v.start[sel], v.end[sel]
    rows = cpu_comm_rows(trace)
    st = trace.start_ns[rows]
    x, xs, xe = xla_async_spans(trace, xla_host_rows(trace))
    return np.r_[rows, x], np.r_[st, xs], np.r_[st + trace.dur_ns[rows], xe]


def xla_async_spans(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, start, end) of XLA collective op rows with each async op's two halves as
    one: a ``-start`` row spans to the end of the first ``-done`` of the same name after
    it (``all-reduce-start.1`` -> ``all-reduce-done.1``, in time order, on any thread);
    the ``-done`` rows are left out (one whose start the trace missed too). A start
    without its done keeps its own span."""
    ev = trace.events
    st = np.asarray(ev["start_ns"][rows], np.int64)
    en = st + np.asarray(ev["dur_ns"][rows], np.int64)
    names = trace.names(rows) if len(rows) else np.zeros(0, object)
    phase = [m.group(2) if (m := re.match(XLA_COLLECTIVE_OP, str(n))) else None for n in names]
    if not any(phase):
        return rows, st, en
    keep = np.array([p != "-done" for p in phase], bool)
    pending: dict[str, list[int]] = {}
    for i in np.argsort(st, kind="stable").tolist():
        if phase[i] == "-start":
            pending.setdefault(str(names[i]).replace("-start", "-done", 1), []).append(i)
        elif phase[i] == "-done" and pending.get(str(names[i])):
            first = pending[str(names[i])].pop(0)
            en[first] = max(en[first], en[i])
    return rows[keep], st[keep], en[keep]


def shape_bytes(dims: object, types: object) -> int:
    """Bytes of the tensors an op's ``Input Dims`` and ``Input type`` describe (JSON text
    or lists); inputs of other types (scalars, tensor lists) count nothing."""
    return sum(input_bytes(dims, types, DTYPE_BYTES, lists=False))


def _c10d_peers(trace: Trace, rows: np.ndarray, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(peer, how, posted) of host send/recv ranges: the peer input of the
    ``c10d::send`` / ``c10d::recv_`` op on the same thread that was running when the
    range began (its ``Concrete Inputs``: process group, tensors, peer, tag), -1 where
    none says; and that op's row (-1: none found). gloo posts the transfer inside
    the op, before its ``gloo:send`` range begins: a message may arrive before it."""
    peer, how = np.full(len(rows), -1, np.int64), np.full(len(rows), "", object)
    posted = np.full(len(rows), -1, np.int64)
    ids = [trace.string_id(n) for n in C10D_P2P]
    posts = np.flatnonzero(np.isin(trace.events["name"], [i for i in ids if i >= 0]))
    if not len(rows) or not len(posts):
        return peer, how, posted
    ev = trace.events
    start, track = ev["start_ns"][rows], ev["track"][rows]
    found = np.full(len(rows), -1, np.int64)
    for tr in unique(track).tolist():
        mine = np.flatnonzero(track == tr)
        cand = posts[ev["track"][posts] == tr]
        if not len(cand):
            continue
        cand = cand[np.argsort(ev["start_ns"][cand], kind="stable")]
        i = np.searchsorted(ev["start_ns"][cand], start[mine], side="right") - 1
        ok = i >= 0
        c = cand[np.maximum(i, 0)]
        ok &= ev["start_ns"][c] + ev["dur_ns"][c] >= start[mine]
        found[mine[ok]] = c[ok]
    has = np.flatnonzero(found >= 0)
    if not len(has):
        return peer, how, posted
    uniq, back = np.unique(found[has], return_inverse=True)
    inputs = _stats(trace, uniq, (keys.CONCRETE_INPUTS,))[keys.CONCRETE_INPUTS]
    names = trace.names(uniq)
    group = group_ranks(trace)
    for k, at in zip(back.tolist(), has.tolist()):
        args = json_arg(inputs[k])
        if not isinstance(args, list) or len(args) < 3 or not str(names[k]).startswith(f"c10d::{ops[at]}"):
            continue
        posted[at] = uniq[k]
        try:
            p = int(args[2])
        except (TypeError, ValueError):
            continue
        if group is not None and 0 <= p < len(group):
            peer[at], how[at] = group[p], "c10d op"
        else:
            peer[at], how[at] = p, "c10d op (rank in its group)"
    return peer, how, posted


def _peers(trace: Trace, rows: np.ndarray, ops: np.ndarray, host: np.ndarray, st: dict[str, np.ndarray]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(peer, how, posted) of each row: the comms args' ``Dst Rank`` (a send) or ``Src
    Rank`` (a recv), else, for host transfers, the posting c10d op's peer; -1 and "" for
    the rest. ``posted``: a host transfer's c10d op (its row; -1: not found)."""
    dst, src = _num(st["Dst Rank"], -1), _num(st["Src Rank"], -1)
    peer = np.where(ops == "recv", src, np.where(ops == "send", dst, np.maximum(dst, src)))
    how = np.where(peer >= 0, "comms args", "").astype(object)
    posted = np.full(len(rows), -1, np.int64)
    ask = np.flatnonzero(host & ((ops == "send") | (ops == "recv")))
    if len(ask):
        p, h, posted[ask] = _c10d_peers(trace, rows[ask], ops[ask])
        none = peer[ask] < 0
        peer[ask[none]], how[ask[none]] = p[none], h[none]
    return peer, how, posted


def collective_table(trace: Trace) -> Table:
    """One row per collective or transfer of one rank, in the order they began; see the
    module doc. A host transfer's ``start_ns`` is when the c10d op that posted it began;
    ``row`` is the event's row in the trace. Made once per trace (or window's view of
    it: the same rows), for the summary's tables and the job's alike."""
    return cache.memo(trace, "collective_table", _collective_table)


def _collective_table(trace: Trace) -> Table:
    rows, start, end = collective_rows(trace)
    by_row = np.argsort(rows, kind="stable")  # stat lookups want ascending rows
    rows, start, end = rows[by_row], start[by_row], end[by_row]
    st = _with_op_args(trace, rows, _stats(trace, rows))
    names = trace.names(rows) if len(rows) else np.zeros(0, object)
    pg_v, world, unsure = gloo_groups(trace, rows, names, st["Process Group Name"])  # gloo's: by their thread
    st = {**st, "Process Group Name": pg_v}
    coll, dtype = st["Collective name"], st["dtype"]
    n_in, n_out, group = _num(st["In msg nelems"]), _num(st["Out msg nelems"]), _num(st["Group size"])
    group = known_group_sizes(trace, group, pg_v)
    ops = np.array([normalise_op(str(c) if c else str(n)) for c, n in zip(coll, names)], object)
    size = np.fromiter((DTYPE_BYTES.get(str(d).lower(), 0) if d is not None else 0 for d in dtype),
                       np.int64, len(rows))
    nbytes = np.maximum(n_in, n_out) * size
    host = ~member(rows, device_view(trace).rows)
    for i in np.flatnonzero((nbytes == 0) & host).tolist():
        nbytes[i] = shape_bytes(st[keys.INPUT_DIMS][i], st[keys.INPUT_TYPE][i])
    nbytes = gathered_bytes(trace, ops, host, start, nbytes, group, DTYPE_BYTES)  # gloo's: its shard's, grown
    xla = np.flatnonzero((nbytes == 0) & np.array([bool(re.match(XLA_COLLECTIVE_OP, str(n))) for n in names], bool))
    if len(xla):
        nbytes[xla] = hlo_bytes(trace, rows[xla])
    peer, peer_from, posted = _peers(trace, rows, ops, host, st)
    ops, peer, peer_from, grouped = _group_ops(trace, rows, ops, host, posted, peer, peer_from)
    root = roots(trace, rows, ops, start, st, grouped, unsure)  # rooted collectives' root rank (-1: unknown)
    o = np.argsort(start, kind="stable")  # time order (of the ranges: the order ranks/critical_path.py takes)
    o = _one_per_group(o, grouped, start)
    at = np.maximum(posted, 0)
    start = np.where(posted >= 0, np.minimum(trace.start_ns[at], start), start)
    start, end = _group_spans(grouped, start, end)
    pg = np.array([str(x) if x is not None else "" for x in pg_v[o]], object)
    keys_ = np.array([f"{g}/{op}" if g and not w else op for g, w, op in zip(pg, world[o], ops[o])], object)
    seq, seq_from = _sequence(keys_, _num(st["Seq"][o], -1))
    return frame({"key": keys_, "seq": seq, "seq_from": seq_from, "op": ops[o], "pg": pg, "name": names[o],
                  "start_ns": start[o].astype(np.int64), "end_ns": end[o].astype(np.int64),
                  "dur_ns": (end - start)[o].astype(np.int64), "bytes": nbytes[o], "group_size": group[o],
                  "p2p": np.fromiter((x in _P2P for x in ops[o]), bool, len(o)), "peer": peer[o],
                  "peer_from": peer_from[o], "host": host[o], "row": rows[o].astype(np.int64), "root": root[o]})


def hlo_bytes(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Bytes of XLA collective op rows (ascending) from the HLO the file holds (JAX writes
    it on ``/host:metadata``): the larger of the op's result and its operands (an
    all-reduce's arrays, an all-gather's result, a reduce-scatter's input: nccl-tests'
    size); 0 where the module or the op is not found, and for an async ``-start`` other
    than an all-reduce's (its result pairs operands with results)."""
    out = np.zeros(len(rows), np.int64)
    st = _stats(trace, rows, (keys.HLO_OP, keys.HLO_MODULE, keys.PROGRAM_ID))
    if not len(rows) or (st[keys.HLO_OP] == None).all():  # noqa: E711
        return out
    from ..formats.xspace.gpu import hlo_modules  # the HLO decoder only for a trace with XLA collectives
    from ..formats.xspace.hlo_cost import nbytes  # (as above)

    hm, by_module = hlo_modules(trace), {}
    for i, (op, mod, pid) in enumerate(zip(st[keys.HLO_OP], st[keys.HLO_MODULE], _num(st[keys.PROGRAM_ID], -1))):
        key = hm.key(str(mod), int(pid)) if op is not None and mod is not None else None
        if key is None or ("-start" in str(op) and not str(op).startswith("all-reduce")):
            continue
        if key not in by_module:
            m = hm.module(key)
            by_module[key] = {} if m is None else {x: ins for c in m.computations for ins in c.instructions
                                                    for x in (ins.name, ins.id)}
        found = by_module[key]
        ins = found.get(str(op))
        try:
            if ins is not None:
                out[i] = int(max([nbytes(ins.shape)] + [nbytes(found[o].shape) for o in ins.operand_ids if o in found]))
        except ValueError:  # a damaged shape: no size
            pass
    return out


def group_op(name: str) -> str:
    """The collective a host op's name names for what it launched (:data:`GROUP_OPS`, with
    a backend's or c10d's prefix, or a torch.distributed function's bare name), else ""."""
    low = name.lower()
    prefixed = low.startswith(_OP_PREFIXES)
    if not prefixed and not low.replace("_", "").isalpha():
        return ""
    op = normalise_op(low)
    return op if op in (GROUP_OPS if prefixed else _BARE_OPS) else ""


def _enclosing_group_ops(trace: Trace, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(op, row) per host row of ``at``: the collective the innermost enclosing host op
    that names one names (:func:`group_op`) on the row's thread when it began, and that
    op's row; "" and -1 where none does."""
    ops, found = np.full(len(at), "", object), np.full(len(at), -1, np.int64)
    strings = trace.strings
    named = {i: op for i, n in enumerate(strings) if (op := group_op(str(n)))}
    if not named or not len(at):
        return ops, found
    ev = trace.events
    cand = np.flatnonzero(member(np.asarray(ev["name"], np.int64), np.fromiter(named, np.int64, len(named))))
    cand = cand[~member(cand, at)]
    if not len(cand):
        return ops, found
    th = cache.threads(trace)
    c_start = np.asarray(ev["start_ns"][cand], np.int64)
    hit = innermost(th[ev["track"][cand]], c_start, c_start + np.asarray(ev["dur_ns"][cand], np.int64),
                    th[ev["track"][at]], np.asarray(ev["start_ns"][at], np.int64))
    ok = hit >= 0
    found[ok] = cand[hit[ok]]
    ops[ok] = [named[int(i)] for i in ev["name"][found[ok]].tolist()]
    return ops, found


def _group_ops(trace: Trace, rows: np.ndarray, ops: np.ndarray, host: np.ndarray, posted: np.ndarray,
               peer: np.ndarray, peer_from: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ops, peer, peer_from, group) with each point-to-point row that an op naming a
    collective launched (a kernel: its launch call inside the op; a host transfer: its
    posting c10d op inside it) made that collective, without a peer; ``group``: the
    enclosing op's row (-1: none), whose rows are one collective."""
    group = np.full(len(rows), -1, np.int64)
    p2p = np.flatnonzero(np.isin(ops, _P2P))
    if not len(p2p):
        return ops, peer, peer_from, group
    at = np.full(len(p2p), -1, np.int64)
    dev = ~host[p2p]
    if dev.any():
        corr = cache.correlation(trace)
        i = np.minimum(np.searchsorted(corr.device_rows, rows[p2p[dev]]), max(len(corr.device_rows) - 1, 0))
        if len(corr.device_rows):
            hit = corr.device_rows[i] == rows[p2p[dev]]
            at[np.flatnonzero(dev)[hit]] = corr.launch[i[hit]]
    at[~dev] = posted[p2p[~dev]]
    has = at >= 0
    if not has.any():
        return ops, peer, peer_from, group
    op, enc = _enclosing_group_ops(trace, at[has])
    sel = p2p[has][enc >= 0]
    if not len(sel):
        return ops, peer, peer_from, group
    ops, peer, peer_from = ops.copy(), peer.copy(), peer_from.copy()
    ops[sel], group[sel] = op[enc >= 0], enc[enc >= 0]
    peer[sel], peer_from[sel] = -1, ""
    return ops, peer, peer_from, group


def _one_per_group(o: np.ndarray, group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The time order ``o`` with the rows of one enclosing collective op (``group``) as
    one: the row that began first kept, the others left out."""
    g = group[o]
    if len(unique(g[g >= 0])) == int((g >= 0).sum()):
        return o
    first = np.r_[True, np.zeros(len(o) - 1, bool)] if len(o) else np.zeros(0, bool)
    seen: set[int] = set()
    for i, k in enumerate(g.tolist()):
        first[i] = k < 0 or k not in seen
        seen.add(k)
    return o[first]


def _group_spans(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) with each row of an enclosing collective op (``group``) spanning the
    group's rows: from the first start to the last end."""
    if (group < 0).all():
        return start, end
    start, end = start.copy(), end.copy()
    for k in unique(group[group >= 0]).tolist():
        m = group == k
        start[m], end[m] = start[m].min(), end[m].max()
    return start, end


#: bus bandwidth = algorithm bandwidth x this factor (n = ranks in the group), as
#: nccl-tests define it: the data each link carries, comparable with the link's peak
def bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall", "alltoallv"):
        return (n - 1) / n
    return 1.0


def collective_stats(tables: dict[int, Table]) -> Table:
    """Per collective type and size over every rank: count, time, bytes, bandwidths.

    Columns: ``op``, ``bytes`` (per call, 0 when the trace gives no size), ``count``,
    ``ranks``, ``total_ns``, ``mean_ns``, ``max_ns`` (kernel time, summed over ranks),
    ``algbw_gbps`` (bytes / mean time), ``busbw_gbps`` (``algbw`` x the nccl-tests bus
    factor of the op and group size; NaN without sizes).
    """
    parts = [(r, t) for r, t in tables.items() if len(t)]
    cols = ["op", "bytes", "count", "ranks", "total_ns", "mean_ns", "max_ns", "algbw_gbps", "busbw_gbps"]
    if not parts:
        return frame({c: np.zeros(0, object if c == "op" else np.float64) for c in cols})

    def column(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.asarray(t[name], dtype) for _, t in parts])

    ops, nbytes, dur, group = column("op", object), column("bytes", np.int64), column("dur_ns", np.int64), \
        column("group_size", np.int64)
    rank = np.repeat(np.array([r for r, _ in parts], np.int64), [len(t) for _, t in parts])
    # groups of (op, bytes) numbered in order of first appearance (pandas' groupby(sort=False))
    _, op_code = np.unique(ops.astype(str), return_inverse=True)
    first, inv = _first_and_group(op_code.ravel().astype(np.int64), nbytes)
    renumber = np.empty(len(first), np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(len(first))
    g, k = renumber[inv.ravel()], len(first)
    count = np.bincount(g, minlength=k)
    total = np.zeros(k, np.int64)
    np.add.at(total, g, dur)
    longest, widest = np.full(k, np.iinfo(np.int64).min), np.full(k, np.iinfo(np.int64).min)
    np.maximum.at(longest, g, dur)
    np.maximum.at(widest, g, group)
    r = np.asarray(rank, np.int64) - (int(rank.min()) if len(rank) else 0)
    width = int(r.max()) + 1 if len(r) else 1  # distinct (group, rank) pairs as one int64 key
    ranks = np.bincount(unique(g * width + r) // width, minlength=k)
    firsts = np.sort(first)
    mean = total / count
    size = nbytes[firsts].astype(np.float64)
    algbw = np.where(size > 0, size / np.maximum(mean, 1), np.nan)  # B/ns = GB/s
    n = np.where(widest > 0, widest, ranks)
    busbw = algbw * np.array([bus_factor(o, int(m)) for o, m in zip(ops[firsts], n)])
    return frame({"op": ops[firsts], "bytes": nbytes[firsts], "count": count, "ranks": ranks, "total_ns": total,
                  "mean_ns": mean, "max_ns": longest, "algbw_gbps": algbw, "busbw_gbps": busbw},
                 order=order_desc(total))




def windowed(trace: Trace, table: Table) -> Table:
    """The rows of a collective table that began in the analysed window (all of them
    for a trace analysed whole): what stragglers, statistics and transfers count."""
    sel = selection(trace)
    if sel is None or not len(table):
        return table
    start = np.asarray(table["start_ns"], np.int64)
    return table.take(inside(sel, start))  # (not between a schedule's cycles)


def collective_summary(trace: Trace) -> Table:
    """:func:`collective_stats` of one trace's collectives in the analysed window (point-
    to-point transfers are in ``transfers``, never here): the same columns, ``ranks`` 1."""
    t = windowed(trace, collective_table(trace))
    return collective_stats({0: t.take(~np.asarray(t["p2p"], bool))})


def _first_and_group(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique`` of the (a, b) pairs (``axis=0``)'s first index of each distinct pair and
    each row's pair: one stable sort of the pairs as one int64 key where they fit."""
    if len(a):
        lo, span = int(b.min()), int(b.max()) - int(b.min()) + 1
        if int(a.min()) >= 0 and (int(a.max()) + 1) * span < 1 << 62:
            return first_and_inverse(a * span + (b - lo))
    _, first, inv = np.unique(np.stack([a, b], axis=1), axis=0, return_index=True, return_inverse=True)
    return first, inv.ravel()
