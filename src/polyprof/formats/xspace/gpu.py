"""XLA's GPU profiler layout (CUPTI on CUDA, roctracer on ROCm), as XProf reads it.

Each stream of a ``/device:GPU:N`` plane is a line named ``Stream #<id>(<kinds>)``, the
kinds of activity it holds (``Kernel``, ``MemcpyH2D``, ``MemcpyD2H``, ``MemcpyD2D``,
``MemcpyP2P``, ``MemcpyOther``, ``Memset``, ``MemoryAlloc``...). An event's own stats
say what it is (``kernel_details``, ``memcpy_details``, ``memset_details``, on the event
or its metadata); where it has none, the line's kinds do. Its XLA op (``hlo_op``,
``hlo_module``), framework op (``tf_op``) and ``correlation_id`` (the host launch call's)
are stats the reader keeps like any other. The stream, which XLA gives only as the
line, becomes each kernel's, copy's and fill's ``stream`` stat (``<id>`` of the line's
name), as the Kineto, Nsight and CUPTI readers set it: analyses that take device activity
to be the events with a stream (HTA's, ``analyze/hta_compat.py``) count them.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from ...trace import keys
from ...trace.categories import DEVICE_ACTIVITY
from ...trace.core import Trace
from ...trace import metadata_keys as mkeys
from ...trace.stats import StatColumn
from ...trace.sorting import member, unique, unique_inverse, unique_rows
from ...trace.vocabulary import CUPTI_OVERHEAD_NAMES, XLA_MODULE_RUN, XLA_RUNTIME_CALLS
from .decode import EventColumns, spans
from .metadata import PlaneMetadata
from .names import CAT_XLA_RUNTIME

if TYPE_CHECKING:
    from .hlo import Module

_STREAM_LINE = re.compile(r"^Stream #(\d+)(?:\((.*)\))?$")
#: an HLO instruction name XLA gives a kernel it emits itself: a fusion (``loop_reduce_fusion``,
#: ``gemm_fusion_dot_2``, ``input_concatenate_fusion.1``) or a wrapped single op (``wrapped_copy``)
_XLA_KERNEL = r"^(?:[A-Za-z_][\w.-]*fusion[\w.-]*|wrapped_[\w.-]+|triton_[\w.-]+)$"  # compiled on first use (re's cache)
#: the ``hlo_op`` of a kernel XLA runs inside a command buffer (a CUDA graph): the thunk's name
_COMMAND_BUFFER = "command_buffer"
#: the ``tf_op`` XLA gives GPU activity in place of a framework op: the module's annotation
_MODULE_PLACEHOLDER = "XlaModule:"

CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_MEMORY = "kernel", "gpu_memcpy", "gpu_memset", "gpu_memory"
#: the categories of a stream line's events that get the line's ``stream`` stat (device activity)
STREAM_CATEGORIES = (CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET)
#: the stat that names what an event is -> its category, in order of precedence; matched
#: without case: XLA writes ``Memset_details`` and ``MemFree_details`` beside ``memcpy_details``
DETAIL_STATS = (("memcpy_details", CAT_MEMCPY), ("memset_details", CAT_MEMSET), ("kernel_details", CAT_KERNEL),
                ("memalloc_details", CAT_MEMORY), ("memfree_details", CAT_MEMORY))


def line_kinds(name: str) -> list[str] | None:
    """The kinds of a ``Stream #N(...)`` line (``[]`` when it lists none); None for other lines."""
    m = _STREAM_LINE.match(name)
    if m is None:
        return None
    return [k.strip() for k in (m.group(2) or "").split(",") if k.strip()]


def line_stream(name: str) -> int | None:
    """The stream id of a ``Stream #N(...)`` line (None for other lines, or an id beyond int64)."""
    m = _STREAM_LINE.match(name)
    if m is None or len(m.group(1)) > 18:
        return None
    return int(m.group(1))


def _kind_category(kind: str) -> str:
    k = kind.lower()
    if k.startswith("memcpy"):
        return CAT_MEMCPY
    if k.startswith("memset"):
        return CAT_MEMSET
    if k.startswith("memory") or k.startswith("memalloc") or k.startswith("memfree"):
        return CAT_MEMORY
    return CAT_KERNEL


def line_category(name: str) -> str | None:
    """The category of a stream line's events when their stats do not say (None: not a
    stream line): the one kind it lists, else kernel."""
    kinds = line_kinds(name)
    if kinds is None:
        return None
    cats = {_kind_category(k) for k in kinds}
    return cats.pop() if len(cats) == 1 else CAT_KERNEL


def is_mixed(name: str) -> bool:
    """A stream line whose events' kinds must be read from their stats."""
    kinds = line_kinds(name)
    return kinds is not None and len({_kind_category(k) for k in kinds}) != 1


def refine_mixed(cols: EventColumns, stat_start: np.ndarray, idx: np.ndarray, cats: np.ndarray, rows: np.ndarray,
                 meta: PlaneMetadata, stat_names: dict[int, str], intern: Callable[[str], int]) -> None:
    """Set the category (``cats``, in place) of the events ``idx[rows]`` (on mixed stream
    lines) from their detail stats (``DETAIL_STATS``), on the event or its metadata."""
    ev = idx[rows]
    n_st = cols.ev_stats[ev]
    st = spans(stat_start[ev], n_st)
    owner = np.repeat(np.arange(len(ev)), n_st)
    mid_tab, code_tab = meta.table[0], meta.table[1]
    done = np.zeros(len(ev), bool)
    for key, cat in DETAIL_STATS:
        ids = np.asarray([m for m, nm in stat_names.items() if nm.lower() == key], np.int64)
        has = np.zeros(len(ev), bool)
        if len(ids):
            has[owner[np.isin(cols.st_mid[st], ids)]] = True
        codes = [i for i, k in enumerate(meta.keys) if k.lower() == key]
        if codes:
            has |= np.isin(cols.ev_mid[ev], mid_tab[np.isin(code_tab, codes)])
        has &= ~done
        if has.any():
            cats[rows[has]] = intern(cat)
            done |= has


def launch_calls(trace: Trace, traceme: int) -> None:
    """Host events of the GPU tracer (the API calls that launched or copied, carrying the
    ``correlation_id`` of their device activity) become runtime calls (``cuda_runtime``,
    ``hip_runtime``, else ``runtime``), so launches are matched as in a Kineto trace."""
    corr = trace.stats.get(keys.CORRELATION_ID)
    if corr is None or not len(corr) or traceme < 0:
        return
    ev = trace.events
    rows = corr.rows[ev["category"][corr.rows] == traceme]
    host = np.asarray([p.kind == "host" for p in trace.planes], bool)
    rows = rows[host[trace.track_plane[ev["track"][rows]]]]
    if not len(rows):
        return
    names = ev["name"][rows]
    uniq = unique(names)
    cat_of = {}
    for i in uniq.tolist():
        nm = trace.strings[i]
        cat_of[i] = "hip_runtime" if nm.startswith(("hip", "hsa")) else \
            "cuda_runtime" if nm.startswith("cu") else "runtime"
    ids = {c: trace.intern(c) for c in set(cat_of.values())}
    table = np.asarray([ids[cat_of[i]] for i in uniq.tolist()], np.int32)
    ev["category"][rows] = table[np.searchsorted(uniq, names)]
    trace.__dict__.pop("kinds", None)


#: the device index XLA puts before some runtime names (``[0] GpuExecutable::ExecuteThunks``)
_DEVICE_INDEX = re.compile(r"^\[\d+\] ")


def is_xla_runtime(name: str) -> bool:
    """Whether a host TraceMe name is XLA's runtime at work (``XLA_RUNTIME_CALLS``, or a
    module's run: ``XLA_MODULE_RUN``), not a framework op."""
    return _DEVICE_INDEX.sub("", name, 1).startswith(XLA_RUNTIME_CALLS) or XLA_MODULE_RUN.search(name) is not None


def runtime_calls(trace: Trace, traceme: int) -> None:
    """Host TraceMe events of XLA's, PjRt's and TSL's runtime (:func:`is_xla_runtime`)
    and the thunks an XLA module's run holds on its thread (the HLO instructions its
    launches are made in) become runtime calls (``xla_runtime``, kind RUNTIME), as CUDA's
    runtime calls in a PyTorch trace: the framework ops left are the user's (the jitted
    function, ``PjitFunction(step)``; TensorFlow's ops), and a launch's framework op is
    the one the user called. On every backend: the CPU runtime's thread pools and
    buffer waits too. Runs after :func:`launch_calls` (a call with a correlation id
    stays the launch it is)."""
    if traceme < 0:
        return
    ev = trace.events
    rows = np.flatnonzero(ev["category"] == traceme)
    if not len(rows):
        return
    uniq, inv = unique_inverse(ev["name"][rows])
    strs = [trace.strings[i] for i in uniq.tolist()]
    runtime = np.fromiter((is_xla_runtime(s) for s in strs), bool, len(strs))[inv]
    module = np.fromiter((XLA_MODULE_RUN.search(s) is not None for s in strs), bool, len(strs))[inv]
    if module.any():
        runtime |= _inside(ev["track"][rows], ev["start_ns"][rows], ev["dur_ns"][rows], np.flatnonzero(module))
    if runtime.any():
        ev["category"][rows[runtime]] = trace.intern(CAT_XLA_RUNTIME)
        trace.__dict__.pop("kinds", None)
    if any(p.name.startswith("/device:GPU") for p in trace.planes):  # CUPTI ran: its overhead records
        overhead = np.fromiter((s in CUPTI_OVERHEAD_NAMES for s in strs), bool, len(strs))[inv] & ~runtime
        if overhead.any():
            ev["category"][rows[overhead]] = trace.intern("overhead")
            trace.__dict__.pop("kinds", None)


def _inside(track: np.ndarray, start: np.ndarray, dur: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Which events lie within one of the ``outer`` events (positions) on their track."""
    out = np.zeros(len(track), bool)
    end = start + dur
    for t in unique(track[outer]).tolist():
        o = outer[track[outer] == t]
        o = o[np.argsort(start[o], kind="stable")]
        on = np.flatnonzero(track == t)
        k = np.searchsorted(start[o], start[on], side="right") - 1
        ok = k >= 0
        ok[ok] = end[on[ok]] <= end[o[k[ok]]]
        out[on[ok]] = True
    return out


def framework_ops(trace: Trace) -> None:
    """The framework op of XLA's GPU activity: its ``tf_op`` stat holds only the module
    annotation (``XlaModule:``), and the op's framework name (the HLO instruction's
    ``op_name``, which XProf's framework_op_stats shows) is the ``name`` stat; that name
    replaces the annotation in ``tf_op`` (and ``op``) at those events."""
    loaded = trace.stats.loaded()
    cols = [loaded[k] for k in ("tf_op", keys.OP) if k in loaded and loaded[k].kind == "O"]
    if not cols:
        return
    tf = cols[0]
    module = _prefixed(tf.values, _MODULE_PLACEHOLDER)
    if not module.any():
        return
    try:
        name = trace.stats["name"]
    except KeyError:
        return
    rows = tf.rows[module]
    found, vals = name.lookup(rows)
    ok = np.fromiter((isinstance(v, str) and v != "" for v in vals), bool, len(vals))
    rows, vals = rows[found][ok], vals[ok]
    for col in {id(c): c for c in cols}.values():
        at = np.searchsorted(col.rows, rows)
        at_ok = (at < len(col.rows)) & (col.rows[np.minimum(at, len(col.rows) - 1)] == rows)
        if col.values.dtype != object:
            col.values = col.values.astype(object)
        col.values[at[at_ok]] = vals[at_ok]


class HloModules:
    """The HLO modules a file holds (``hlo.py``; JAX stores them on ``/host:metadata``), by
    (module name, program id), each decoded when first asked for (:meth:`module`) and
    then kept for the trace's op attribution and FLOPs alike (:func:`hlo_modules`). A
    damaged one is named in a warning once and reads as absent."""

    def __init__(self, trace: Trace):
        self.planes, self.metadata = trace.planes, trace.metadata  # not the trace: the memo holds this
        self.decoded: dict[tuple[str, int], dict[str, str] | None] = {}
        self.kernels: dict[tuple[str, int], dict[str, tuple[str, str]]] = {}
        self.modules: dict[tuple[str, int], Module | None] = {}
        self.errors: dict[tuple[str, int], str] = {}

    @cached_property
    def protos(self) -> dict[tuple[str, int], bytes]:
        from .hlo import modules  # only a file with XLA ops on a GPU

        out: dict[tuple[str, int], bytes] = {}
        for p in self.planes:
            out.update(modules(p.properties.get("xspace_event_metadata") or []))
        return out

    def module(self, key: tuple[str, int]) -> Module | None:
        """Module ``key`` of :attr:`protos` decoded (``hlo.module``); None where its HLO is
        damaged (:attr:`errors` says how)."""
        if key not in self.modules:
            from .hlo import module  # the HLO decoder: only a file with XLA ops and their HLO

            try:
                self.modules[key] = module(self.protos[key])
            except ValueError as e:
                self.modules[key], self.errors[key] = None, str(e)
        return self.modules[key]

    @cached_property
    def by_name(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        for k in self.protos:
            out.setdefault(k[0], []).append(k)
        return out

    def key(self, mod: str, pid: int) -> tuple[str, int] | None:
        """The module of that name and program id; else the only one of that name; else
        (no module name, as XProf finds modules) the only one of that program id."""
        if (mod, pid) in self.protos:
            return (mod, pid)
        named = self.by_name.get(mod, ())
        if len(named) == 1:
            return named[0]
        if mod or pid < 0:
            return None
        with_pid = [k for k in self.protos if k[1] == pid]
        return with_pid[0] if len(with_pid) == 1 else None

    def ops(self, mod: str, pid: int) -> dict[str, str] | None:
        """instruction name -> its framework op (``op_name``, "" where none); None: no HLO."""
        key = self.key(mod, pid)
        if key is None:
            return None
        if key not in self.decoded:
            from .hlo import op_names  # the HLO decoder: only a file with XLA ops on a GPU and their HLO

            decoded = self.module(key)
            try:
                self.decoded[key] = None if decoded is None else op_names(decoded)
            except ValueError as e:  # an instruction's metadata
                self.errors[key], self.decoded[key] = str(e), None
            if self.decoded[key] is None:
                self.metadata.setdefault(mkeys.WARNINGS, []).append(
                    f"xspace: the HLO of module {key[0]}({key[1]}) is damaged ({self.errors[key]}): its kernels "
                    "keep the ops their stats name")
        return self.decoded[key]

    def kernel_table(self, mod: str, pid: int) -> dict[str, tuple[str, str]] | None:
        """kernel name -> (instruction name, framework op) (``hlo.kernel_names``); None: no HLO."""
        ops = self.ops(mod, pid)
        if ops is None:
            return None
        key = self.key(mod, pid)
        assert key is not None
        if key not in self.kernels:
            from .hlo import kernel_names  # the HLO decoder: only a file with XLA ops on a GPU and their HLO

            self.kernels[key] = kernel_names(ops)
        return self.kernels[key]


def hlo_modules(trace: Trace) -> HloModules:
    """The trace's :class:`HloModules`, made once and kept in its ``__dict__`` beside its
    cached properties, which the analyses' views of it share (``copy.copy``,
    analyze/window.py): a module the reader decoded for op attribution is not decoded
    again for its FLOPs."""
    found = trace.__dict__.get("_xspace_hlo_modules")
    if not isinstance(found, HloModules):
        found = trace.__dict__["_xspace_hlo_modules"] = HloModules(trace)
    return found


def xla_rows(trace: Trace, in_command_buffer: bool) -> tuple[Mapping[str, StatColumn], StatColumn, np.ndarray] | None:
    """(the loaded stats, the ``hlo_op`` column, positions in it) of the XLA ops that ran:
    a GPU's kernels, copies and fills whose ``hlo_op`` is (or is not) a command buffer's,
    and (not in a command buffer) the ops of XLA's CPU runtime, host events that are a
    JAX CPU profile's device activity (``xla.classify_host_events``); None where there are none."""
    loaded = trace.stats.loaded()
    hlo = loaded.get(keys.HLO_OP)
    if hlo is None or hlo.kind != "O" or not len(hlo):
        return None
    at = _xla_positions(trace, hlo, in_command_buffer)
    return (loaded, hlo, at) if len(at) else None


def _xla_positions(trace: Trace, hlo: StatColumn, in_command_buffer: bool) -> np.ndarray:
    in_cb = _prefixed(hlo.values, _COMMAND_BUFFER)
    sel = in_cb if in_command_buffer else ~in_cb & ~_prefixed(hlo.values, "", exact=True)
    if not sel.any():
        return np.zeros(0, np.int64)
    at = np.flatnonzero(sel)
    if in_command_buffer:
        device = np.asarray([p.kind == "device" for p in trace.planes], bool)
        return at[device[trace.track_plane[trace.events["track"][hlo.rows[at]]]]]
    # kernels, copies, fills on a device (not a TPU's XLA ops, which XProf reads otherwise);
    # on a host plane only the CPU runtime's ops are device activity (a GPU's host TraceMes are not)
    return at[member(trace.kinds[hlo.rows[at]], np.asarray(DEVICE_ACTIVITY, trace.kinds.dtype))]


def module_combos(trace: Trace, rows: np.ndarray, first: np.ndarray
                   ) -> tuple[list[tuple[int, str, int]], np.ndarray]:
    """The distinct (``first`` code, module, program id) of ``rows`` and each row's."""
    mods = _row_values(trace, keys.HLO_MODULE, rows, "")
    pids = _row_values(trace, keys.PROGRAM_ID, rows, -1)
    mod_names, mod_code = np.unique(mods.astype(str), return_inverse=True)
    pid_int = np.fromiter((v if isinstance(v, int) and -2**63 <= v < 2**63 else -1 for v in pids.tolist()),
                          np.int64, len(pids))
    combos, _, inv = unique_rows(first, mod_code.reshape(-1), pid_int)
    return [(f, str(mod_names[mc]), pid) for f, mc, pid in combos.tolist()], inv


def xla_ops(trace: Trace) -> None:
    """The XLA ops of GPU activity and their framework ops from the file's HLO, where it has
    it: :func:`hlo_framework_ops`, then :func:`command_buffer_ops` (each module decoded once)."""
    modules = hlo_modules(trace)
    hlo_framework_ops(trace, modules)
    command_buffer_ops(trace, modules)


def hlo_framework_ops(trace: Trace, modules: HloModules | None = None) -> None:
    """XProf's framework op of XLA's GPU activity (``ConvertDeviceTraceXPlaneToOpMetricsDb``):
    an event with an ``hlo_op`` (the last of its ``::``-separated names) is the instruction
    of that name in its module's HLO (by ``program_id``), and its framework op is that
    instruction's ``op_name`` (``jit(loss_fn)/jvp()/reduce_sum``), or, where it has none, the
    instruction's name, whatever the ``tf_op`` and ``name`` stats say (the runtime's
    annotation, which on ROCm can be the module, ``jit(loss_fn)``, or a neighbour's op).
    An event whose instruction the file's HLO does not hold keeps its stats' op (XProf's
    framework_op_stats leaves it out); command buffers are :func:`command_buffer_ops`'."""
    found = xla_rows(trace, in_command_buffer=False)
    if found is None:
        return
    loaded, hlo, at = found
    if not any(k in loaded and loaded[k].kind == "O" for k in ("tf_op", keys.OP)):
        return  # no framework op to set (XLA's CPU runtime gives its ops none): no HLO decoded
    modules = hlo_modules(trace) if modules is None else modules
    if not modules.protos:
        return
    rows = hlo.rows[at]
    hlo_names, hlo_code = np.unique(hlo.values[at].astype(str), return_inverse=True)
    combos, inv = module_combos(trace, rows, hlo_code.reshape(-1))
    op_of = np.empty(len(combos), object)
    for c, (hc, mod, pid) in enumerate(combos):
        ops = modules.ops(mod, pid)
        name = str(hlo_names[hc]).rsplit("::", 1)[-1]
        op = ops.get(name) if ops is not None else None
        op_of[c] = None if op is None else op or name
    ok = np.asarray([v is not None for v in op_of.tolist()], bool)[inv]
    if ok.any():
        _set_ops(loaded, rows[ok], op_of[inv][ok])


def command_buffer_ops(trace: Trace, modules: HloModules | None = None) -> None:
    """The ops of kernels XLA ran inside a command buffer (a CUDA graph), whose stats name
    only the command buffer (``hlo_op`` ``command_buffer_1``) and the module annotation
    (``tf_op`` ``XlaModule:``). An XLA-emitted kernel is named after the HLO instruction it
    executes: where the file holds the module's HLO (``hlo.py``), the instruction of that
    name becomes the kernel's ``hlo_op`` and its ``op_name`` (``jit(step)/jvp()/dot_general``)
    its framework op; without the HLO, a kernel named like an XLA fusion (``_XLA_KERNEL``)
    gets its own name as ``hlo_op``. A kernel the HLO does not name (a cuBLAS or cuDNN
    kernel run by a library call) keeps the command buffer. The framework op is otherwise
    the module (``jit_step``, from ``hlo_module``), the jitted function. The per-kernel
    ``scope_range_id`` stays a stat: the XSpace holds no call stack for it."""
    found = xla_rows(trace, in_command_buffer=True)
    if found is None:
        return
    loaded, hlo, at = found
    rows = hlo.rows[at]
    modules = hlo_modules(trace) if modules is None else modules
    # one decision per distinct (kernel name, module, program id), spread back to the rows
    combos, inv = module_combos(trace, rows, trace.events["name"][rows])
    names = trace.strings
    keep = np.zeros(len(combos), bool)
    hlo_of = np.empty(len(combos), object)
    op_of = np.empty(len(combos), object)
    for c, (nid, mod, pid) in enumerate(combos):
        kname = names[nid]
        tab = modules.kernel_table(mod, pid)
        ins = tab.get(kname) if tab is not None else None
        if ins is not None:
            hlo_of[c], op_of[c] = ins[0], ins[1] or mod
        else:
            keep[c] = not (tab is None and re.match(_XLA_KERNEL, kname))
            hlo_of[c], op_of[c] = kname, mod
    new_hlo = np.where(keep[inv], hlo.values[at].astype(object), hlo_of[inv])
    new_op = op_of[inv]
    if hlo.values.dtype != object:
        hlo.values = hlo.values.astype(object)
    hlo.values[at] = new_hlo
    ok = np.asarray([o != "" for o in op_of.tolist()], bool)[inv]
    _replace_placeholder(loaded, rows[ok], new_op[ok])


def _prefixed(values: np.ndarray, prefix: str, exact: bool = False) -> np.ndarray:
    """Whether each value is a text starting with ``prefix`` (``exact``: equal to it): one
    test per distinct value (a stat column holds few), spread back by a lookup."""
    vals = values.tolist()
    if exact:
        def ok(v: object) -> bool:
            return isinstance(v, str) and v == prefix
    else:
        def ok(v: object) -> bool:
            return isinstance(v, str) and v.startswith(prefix)
    try:
        test = {v: ok(v) for v in set(vals)}
    except TypeError:  # a value that cannot be hashed (not a text): tested one by one
        return np.fromiter(map(ok, vals), bool, len(vals))
    return np.fromiter(map(test.__getitem__, vals), bool, len(vals))


def _row_values(trace: Trace, key: str, rows: np.ndarray, missing: object) -> np.ndarray:
    """The values of stat ``key`` at ``rows`` (``missing`` where a row has none)."""
    out = np.full(len(rows), missing, object)
    if key not in trace.stats:
        return out
    found, vals = trace.stats[key].lookup(rows)
    out[found] = vals
    return out


def _set_ops(loaded: Mapping[str, StatColumn], rows: np.ndarray, ops: np.ndarray) -> None:
    """Set the framework op (``tf_op``, ``op``) of ``rows`` (ascending) to ``ops`` where the
    event has one (XLA's GPU tracer gives every op one, if only its placeholder)."""
    done: set[int] = set()
    for key in ("tf_op", keys.OP):
        col = loaded.get(key)
        if col is None or col.kind != "O" or id(col) in done:
            continue
        pos = np.searchsorted(col.rows, rows)
        hit = (pos < len(col.rows)) & (col.rows[np.minimum(pos, len(col.rows) - 1)] == rows)
        if col.values.dtype != object:
            col.values = col.values.astype(object)
        col.values[pos[hit]] = ops[hit]
        done.add(id(col))


def _replace_placeholder(loaded: Mapping[str, StatColumn], rows: np.ndarray, ops: np.ndarray) -> None:
    """Set the framework op (``tf_op``, ``op``) of ``rows`` to ``ops`` where it is XLA's
    module placeholder (``XlaModule:``)."""
    for key in ("tf_op", keys.OP):
        col = loaded.get(key)
        if col is None or col.kind != "O" or not len(col):
            continue
        pos = np.searchsorted(col.rows, rows)
        hit = (pos < len(col.rows)) & (col.rows[np.minimum(pos, len(col.rows) - 1)] == rows)
        placeholder = _prefixed(col.values[pos[hit]], _MODULE_PLACEHOLDER)
        if col.values.dtype != object:
            col.values = col.values.astype(object)
        col.values[pos[hit][placeholder]] = ops[hit][placeholder]


def uninterpreted_planes(trace: Trace) -> list[str]:
    """One line per device plane with events but no device activity (kernels, copies,
    fills, XLA ops) polyprof recognises, naming its lines: such a plane would otherwise
    read as an idle device."""
    if not trace.n_events:
        return []
    ev = trace.events
    kinds = trace.kinds
    busy = member(kinds, np.asarray(DEVICE_ACTIVITY, kinds.dtype))
    plane_of = trace.track_plane[ev["track"]]
    n = np.bincount(plane_of, minlength=len(trace.planes))
    known = np.bincount(plane_of[busy], minlength=len(trace.planes))
    out = []
    for p in trace.planes:
        if p.kind != "device" or not n[p.id] or known[p.id]:
            continue
        lines = [t.name for t in trace.tracks if t.plane == p.id]
        shown = ", ".join(repr(x) for x in lines[:4]) + (f" and {len(lines) - 4} more" if len(lines) > 4 else "")
        out.append(f"xspace: {p.name}: {int(n[p.id])} events on lines {shown} that polyprof does not "
                   "interpret as device activity (not read as kernels, copies or XLA ops)")
    return out

