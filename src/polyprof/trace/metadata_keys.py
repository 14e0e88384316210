"""Metadata keys: every key polyprof writes into a trace's metadata, declared once with
its type and its scope, as :mod:`polyprof.trace.keys` declares the stat keys.

Two scopes:

* ``SOURCE``: what describes where the data came from (a session, a file, a plugin's
  device). It is the trace's metadata while the trace has one source; when traces
  merge (ranks, files, the plugins of one session), each input's metadata also goes to
  its source (``Source.metadata``, trace/merge.py), so it stays per source.
* ``TRACE``: what describes this trace object as a whole: what was derived or selected
  from it, its title. Not per source.

And one more place: ``Source.clock`` (scope ``CLOCK``) holds where a source sits in
time: its wall anchor and, once ranks are aligned, the alignment applied.

**Clock fits** are recorded in one place and one way: ``metadata[CLOCK_SYNC]`` of the
source, keyed by the *plane* whose times were mapped, then by the plugin that mapped
them: ``{"/device:OpenCL:0": {"opencl": fit}, "/host:CPU": {"torch": summary}}``.
Write them with :func:`record_fit`, read them with :func:`clock_fits`. (The
alignment of whole ranks onto each other is the source's ``clock["alignment"]``:
trace/clock.py.)

A Kineto / Chrome JSON document's other top-level fields (``schemaVersion``,
``traceName``, a vendor's own) are kept verbatim in the metadata by its reader: they
are the file's, not polyprof's, and are not declared here, except the few polyprof
reads (``DEVICE_PROPERTIES``, ``DISTRIBUTED_INFO``, ``BASE_TIME_NS``...).
``tests/test_metadata_keys.py`` fails on any other key a reader or a live session
writes that is not declared here, or has another type.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, NamedTuple

TRACE = "trace"
SOURCE = "source"
CLOCK = "clock"


class MetaKey(NamedTuple):
    """One declared metadata key."""

    name: str
    type: type | tuple[type, ...]
    scope: str
    doc: str


#: every declared key, by name (filled by :func:`_key`)
DECLARED: dict[str, MetaKey] = {}
#: the declared keys of ``Source.clock``
DECLARED_CLOCK: dict[str, MetaKey] = {}


def _key(name: str, typ: type | tuple[type, ...], scope: str, doc: str) -> str:
    into = DECLARED_CLOCK if scope == CLOCK else DECLARED
    assert name not in into, name
    into[name] = MetaKey(name, typ, scope, doc)
    return name


#: the value of CLOCK_NAME in what polyprof records: its reference clock (time.perf_counter_ns)
REFERENCE_CLOCK = "CLOCK_MONOTONIC"

# --- a live session (collect/session.py) -------------------------------------------
POLYPROF_VERSION = _key("polyprof_version", str, SOURCE, "the polyprof that recorded the trace")
CLOCK_NAME = _key("clock", str, SOURCE, "the clock of the times: CLOCK_MONOTONIC (live), wall, xspace...")
SESSION = _key("session", dict, SOURCE, "start_ns, stop_ns, pid, hostname, argv, rank, world_size, clock_domain "
               "(collect/clock.py: clock_domain) of the recording session")
WALL_ANCHOR = _key("wall_anchor", dict, SOURCE, "mono_ns, wall_ns, uncertainty_ns: a session time and the "
                   "wall-clock time read with it")
PLUGINS = _key("plugins", dict, SOURCE, "plugin name -> what became of it (ok, failed, unavailable: why)")
PLUGIN_ERRORS = _key("plugin_errors", list, SOURCE, "{plugin, phase, error} of each plugin failure")
WARNINGS = _key("warnings", list, SOURCE, "what a reader or plugin wants the user to know (texts, or "
                "{plugin, message})")


def warning_texts(metadata: dict) -> list[str]:
    """The trace's warnings as lines: a text as it is, ``{plugin, message}`` as
    ``plugin: message``."""
    out = []
    for w in metadata.get(WARNINGS) or []:
        if isinstance(w, dict) and "message" in w:
            out.append(f"{w['plugin']}: {w['message']}" if w.get("plugin") else str(w["message"]))
        else:
            out.append(str(w))
    return out


SCHEDULE = _key("schedule", dict, SOURCE, "the recording schedule followed, recorded_steps, windows_ns")
#: ``schedule["by"]`` of one process's several files read as one trace
#: (``ranks.sources.TraceFiles``): each file a recording (``windows_ns``), the time between
#: them not recorded
SCHEDULE_BY_FILES = "its files"
CLOCK_SYNC = _key("clock_sync", dict, SOURCE, "plane name -> plugin -> the fit that put the plane's times on "
                  "the session clock (record_fit)")
FORKED_CHILD = _key("forked_child", bool, SOURCE, "a forked child's copy of a session: it recorded nothing")
NESTED_IN = _key("nested_in", dict, SOURCE, "the outer session this one nested in (collect/nested.py)")
CAPTURE = _key("capture", dict, SOURCE, "an on-demand capture: session_id, peer... (capture/server.py)")
# --- plugins' own sections -----------------------------------------------------------
OPENCL = _key("opencl", dict, SOURCE, "the OpenCL plugin: api_calls, device_events, pyopencl_imported...")
TORCH = _key("torch", dict, SOURCE, "the torch plugin: what torch's recording said (schemaVersion...)")
JAX = _key("jax", dict, SOURCE, "the jax plugin: the XSpace's hostnames, errors, task environment")
NATIVE_PLUGINS = _key("native_plugins", dict, SOURCE, "native plugin name -> library, abi, process, bytes")
CUPTI = _key("cupti", dict, SOURCE, "the cupti plugin: implementation, records, buffers, calls_not_kept, problems")
NVTX = _key("nvtx", dict, SOURCE, "NVTX through polyprof's injection library (plugins/nvtx): recorded, "
            "dropped, ranges, marks, attached NVTX instances, or why NVTX was not recorded")
# --- readers -------------------------------------------------------------------------
FILE_SOURCE = _key("source", (dict, str), SOURCE, "the file read: format, path")
XSPACE = _key("xspace", dict, SOURCE, "an XSpace's hostnames, errors, warnings, profile times, stat kinds")
CHROME_METADATA_EVENTS = _key("chrome_metadata_events", list, SOURCE, "Chrome 'M' events not understood")
NSYS = _key("nsys", dict, SOURCE, "an Nsight Systems database: version, tables not read, notes")
ROCPD = _key("rocpd", dict, SOURCE, "a rocpd database: runs, schema versions")
ROCPROF = _key("rocprof", dict, SOURCE, "a rocprofv3 JSON file: format, processes")
TORCH_MEMORY_SNAPSHOT = _key("torch_memory_snapshot", dict, SOURCE, "a torch memory snapshot: devices, history "
                             "entries per device, segments, the allocator's settings")
PROCESS_NAME = _key("process_name", str, SOURCE, "the process's name (a source's metadata: nsys, rocprof)")
RANK = _key("rank", int, SOURCE, "the rank of the job (a Kineto file's distributedInfo.rank)")
WORLD_SIZE = _key("world_size", int, SOURCE, "the ranks of the job (distributedInfo.world_size)")
BACKEND = _key("backend", str, SOURCE, "the collectives' backend (distributedInfo.backend: nccl...)")
# --- fields of a Kineto document that polyprof reads (kept verbatim, as all its fields) ---
DISTRIBUTED_INFO = _key("distributedInfo", dict, SOURCE, "Kineto: rank, world_size, backend, process groups")
DEVICE_PROPERTIES = _key("deviceProperties", list, SOURCE, "Kineto: one dict per device (id, name, memory...)")
BASE_TIME_NS = _key("baseTimeNanoseconds", int, SOURCE, "Kineto: the wall-clock origin of the ts values")
SCHEMA_VERSION = _key("schemaVersion", int, SOURCE, "Kineto: the document's schema version")
TRACE_NAME = _key("traceName", str, SOURCE, "Kineto: the trace's name")
DISPLAY_TIME_UNIT = _key("displayTimeUnit", str, SOURCE, "Chrome JSON: ms or ns")
# --- this trace as a whole ---------------------------------------------------------------
TITLE = _key("title", str, TRACE, "a title for reports")
DERIVED = _key("derived", bool, TRACE, "True: the derived lines were added (derive/)")
CORRELATION = _key("correlation", dict, TRACE, "how host and device events were correlated (counts by method)")
DERIVED_LINES = _key("derived_lines", dict, TRACE, "derived line name -> events on it")
WINDOW = _key("window", str, TRACE, "the steps a windowed trace keeps (analyze/window.py)")

# --- Source.clock ------------------------------------------------------------------------
SOURCE_WALL_ANCHOR = _key("wall_anchor", dict, CLOCK, "the source's wall anchor (as WALL_ANCHOR)")
SOURCE_CLOCK_DOMAIN = _key("clock_domain", str, CLOCK, "which machine's monotonic clock the source's times are on "
                           "(a polyprof session's: its SESSION clock_domain); two sources of one domain read one clock")
ALIGNMENT = _key("alignment", dict, CLOCK, "the fit applied to put this source on the job's reference "
                 "(trace/clock.py: ClockFit.to_dict)")


def declared(name: str, scope: str = SOURCE) -> MetaKey | None:
    """The declaration of ``name`` (``scope`` CLOCK: a key of ``Source.clock``)."""
    return (DECLARED_CLOCK if scope == CLOCK else DECLARED).get(name)


def problems(metadata: Mapping[str, object], scope: str = SOURCE, foreign: frozenset[str] | set[str] = frozenset()
             ) -> list[str]:
    """What is undeclared or of another type than declared in ``metadata`` (a trace's,
    or with ``scope`` CLOCK a source's clock); ``foreign``: keys a file's reader keeps
    verbatim (a Kineto document's top-level fields), not checked."""
    out = []
    for k, v in metadata.items():
        if k in foreign:
            continue
        d = declared(k, scope)
        if d is None:
            out.append(f"{k!r} is not declared in trace/metadata_keys.py")
        elif not isinstance(v, d.type) or (d.type is int and isinstance(v, bool)):
            out.append(f"{k!r} is a {type(v).__name__}, declared {d.type}")
    return out


# --- clock fits ---------------------------------------------------------------------
def record_fit(metadata: dict[str, Any], plane: str, plugin: str, fit: Mapping[str, object]) -> None:
    """Record that ``plugin`` put the times of ``plane`` on the session clock by ``fit``
    (a ``ClockFit.to_dict()``, or a plugin's summary with ``method`` and ``bound_ns``)."""
    metadata.setdefault(CLOCK_SYNC, {}).setdefault(plane, {})[plugin] = dict(fit)


def clock_fits(metadata: Mapping[str, object]) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """(plane, plugin, fit) of every fit recorded in ``metadata``; traces written
    before the one convention (plane -> fit, or plugin -> summary) read as plane ->
    "unknown" and None -> plugin."""
    cs = metadata.get(CLOCK_SYNC)
    if not isinstance(cs, Mapping):
        return
    for key, value in cs.items():
        if not isinstance(value, Mapping):
            continue
        if not str(key).startswith("/"):  # before: plugin -> summary (torch, jax)
            yield None, str(key), dict(value)
        elif value and all(isinstance(v, Mapping) for v in value.values()):
            for plugin, fit in value.items():
                yield str(key), str(plugin), dict(fit)
        else:  # before: plane -> fit (OpenCL)
            yield str(key), "unknown", dict(value)


def fits_of(metadata: Mapping[str, object], plugin: str) -> dict[str | None, dict[str, Any]]:
    """Plane -> the fit ``plugin`` recorded for it."""
    return {plane: fit for plane, who, fit in clock_fits(metadata) if who == plugin}


def plugin_fit(metadata: Mapping[str, object], plugin: str) -> dict[str, Any]:
    """The fit of a plugin that maps one clock for all its planes (torch, jax, a native
    plugin): the same on each of them. Empty when it recorded none."""
    return next(iter(fits_of(metadata, plugin).values()), {})
