"""JAX's and TensorFlow's own Chrome traces of XLA's CPU backend, read as the XSpace
they come from.

``jax.profiler.trace(..., create_perfetto_trace=True)`` writes ``*.trace.json.gz`` beside
the ``.xplane.pb``: the profiler's planes as processes named as in the XSpace
(``/host:CPU``), its host TraceMe events as slices without a category, XLA's ops among
them with ``hlo_op`` / ``hlo_module`` args, Python calls named ``$file:line fn``. Read as
they were, a summary of one listed every slice in the events table and found no device
work, no op and no runtime call. :func:`classify` gives the host slices the categories
the XSpace reader gives the same events (``formats/xspace/reader.py``): TraceMe events
(``traceme``, framework ops), of which those naming an HLO op are the ops' execution
(``xla_op``: the profile's device activity), ``$``-names Python calls, and XLA's and
PjRt's runtime (``xla_runtime``) — the XSpace reader's own functions, so both files of
one profile read alike. A file is such a trace when every process it names is a
``/host:`` plane, none is a device and no event has a category (:func:`is_jax_cpu`; not
a file polyprof wrote); a GPU profile's Chrome export is read as any Chrome trace with
device processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.stats import StatColumn
from . import lenient

if TYPE_CHECKING:
    from .collector import _Collector

#: a ``StepTraceAnnotation``'s arg: its step number
STEP_NUM = "step_num"


def is_jax_cpu(col: "_Collector", trace: Trace) -> bool:
    """Whether ``trace`` is a JAX/TensorFlow profiler's Chrome export of host planes only:
    every named process is an XSpace host plane (``/host:CPU``), none is a device, and
    no event has a category (polyprof names a Kineto trace's host plane ``/host:CPU``
    too: the file's own process names decide)."""
    names = [n for info in col.process.values() if isinstance(n := info.get("process_name"), str)]
    if not names or not all(n.startswith("/host:") for n in names):
        return False
    if any(p.kind == "device" for p in trace.planes) or not trace.n_events:
        return False
    return bool((trace.events["category"] == trace.string_id("")).all())


def classify(trace: Trace) -> None:
    """The host slices without a category as the XSpace reader's TraceMe events."""
    from ..xspace import gpu, xla  # only for such a file: the XSpace reader's rules
    from ..xspace.names import CAT_TRACEME  # (the same: its category)

    blank = trace.string_id("")
    if not trace.n_events or blank < 0:
        return
    cat = trace.events["category"]
    traceme = trace.intern(CAT_TRACEME)
    cat[cat == blank] = traceme
    trace.__dict__.pop("kinds", None)  # (cached from the categories)
    _steps(trace)
    xla.classify_host_events(trace, False)  # steps, XLA's ops, Python calls
    gpu.runtime_calls(trace, traceme)  # (every backend's runtime: the CPU's thread pools and waits too)
    trace.__dict__.pop("kinds", None)


def _steps(trace: Trace) -> None:
    """The step number of a ``StepTraceAnnotation`` (its ``step_num`` arg, text in the
    JSON) as the trace's step stat, as the XSpace reader has it (its ``step_num`` stat):
    ``xla.classify_host_events`` makes those events steps. A trace with a step stat of
    its own keeps it."""
    col = trace.stats.get(STEP_NUM)
    if col is None or not len(col) or keys.STEP in trace.stats:
        return
    values = np.array([lenient.number(v) for v in col.values.tolist()], dtype=np.float64) \
        if col.kind == "O" else col.values.astype(np.float64)
    ok = np.isfinite(values) & (values >= 0) & (values == np.floor(values))
    if ok.any():
        trace.stats[keys.STEP] = StatColumn(col.rows[ok], values[ok].astype(np.int64))
