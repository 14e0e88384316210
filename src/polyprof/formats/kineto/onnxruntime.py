"""onnxruntime's profiles (``SessionOptions.enable_profiling``: ``onnxruntime_profile_*.json``,
a Chrome JSON array), read as an inference program's steps and operators.

onnxruntime writes its session's phases with category ``Session``
(``model_loading_array``, ``session_initialization``, one ``model_run`` per
``InferenceSession.run`` with the executor's ``SequentialExecutor::Execute`` inside it)
and each graph node it ran with category ``Node``: ``<node name>_kernel_time`` (the
operator's run, its type in the ``op_name`` arg and its execution provider in
``provider``) and, in some versions, ``<node name>_fence_before`` / ``_fence_after``
around it (the waits for the node's inputs and outputs). Kept as they are, those
categories mean nothing to the analyses: a summary had no steps and no operators.

After the Trace is built, :func:`classify` makes each ``model_run`` a step (category
``step``, stat ``step`` its run's place in time order: ``derive/steps.py`` takes them),
and each ``_kernel_time`` node a framework op (``cpu_op``: the operator tables and the
ops' device time). Names and times stay the file's. A file is onnxruntime's when it has
``model_run`` events of category ``Session`` (:func:`is_onnxruntime`).

Runs that overlap in time (``run`` called from several threads at once, as an inference
server does) are concurrent requests, not steps: steps follow one another (the analysed
window runs from a step's start to a later one's end; the first is left out as the
warm-up), which overlapping runs do not. Then no run is a step: the whole profile is
analysed, nothing is left out, the runs keep category ``Session`` (the events table
lists them), and a warning says why. Each group of overlapping runs as one step was not
taken: where such groups end depends on chance gaps between requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import logs
from ...trace import keys
from ...trace import metadata_keys as mkeys
from ...trace.core import Trace
from ...trace.sorting import unique
from ...trace.stats import StatColumn

if TYPE_CHECKING:
    from .collector import _Collector

log = logs.kept(__name__)

SESSION, NODE, RUN = "Session", "Node", "model_run"
KERNEL_SUFFIX = "_kernel_time"


def may_be_onnxruntime(col: "_Collector") -> bool:
    """Whether a file being read may be onnxruntime's (its names and categories so far
    hold ``model_run`` and ``Session``): ``chunks.py`` reads such a file whole, as
    :func:`classify` works on the whole trace."""
    return col.b.string_id(RUN) >= 0 and col.b.string_id(SESSION) >= 0


def is_onnxruntime(trace: Trace) -> bool:
    """Whether ``trace`` holds onnxruntime's ``model_run`` events (category ``Session``)."""
    run, session = trace.string_id(RUN), trace.string_id(SESSION)
    if run < 0 or session < 0 or not trace.n_events:
        return False
    ev = trace.events
    return bool(((ev["name"] == run) & (ev["category"] == session)).any())


def classify(trace: Trace) -> None:
    """Steps of the ``model_run`` events unless they overlap, framework ops of the
    ``_kernel_time`` nodes (module doc); the trace's own step stat, if it has one, is kept."""
    ev = trace.events
    runs = np.flatnonzero((ev["name"] == trace.string_id(RUN)) & (ev["category"] == trace.string_id(SESSION))
                          & (ev["dur_ns"] > 0))
    node = trace.string_id(NODE)
    if node >= 0:
        kernel_names = np.fromiter((s.endswith(KERNEL_SUFFIX) for s in trace.strings), bool, len(trace.strings))
        ops = np.flatnonzero((ev["category"] == node) & kernel_names[ev["name"]])
        if len(ops):
            ev["category"][ops] = trace.intern(keys.CAT_CPU_OP)
    if len(runs) and keys.STEP not in trace.stats:
        runs = runs[np.argsort(ev["start_ns"][runs], kind="stable")]
        ends = np.maximum.accumulate(ev["start_ns"][runs] + ev["dur_ns"][runs])
        inside = int(np.count_nonzero(ev["start_ns"][runs][1:] < ends[:-1]))  # runs starting before one ended
        if inside:
            _concurrent(trace, len(runs), inside, len(unique(ev["track"][runs])))
            runs = runs[:0]  # (none a step)
    if len(runs) and keys.STEP not in trace.stats:
        ev["category"][runs] = trace.intern(keys.CAT_STEP)
        order = np.argsort(runs, kind="stable")  # the stat's rows ascending, numbered by time
        trace.stats[keys.STEP] = StatColumn(runs[order], np.arange(len(runs), dtype=np.int64)[order])
    trace.__dict__.pop("kinds", None)  # (cached from the categories)


def _concurrent(trace: Trace, runs: int, inside: int, threads: int) -> None:
    """Say in the trace's warnings (and the log) that its runs overlap: not steps."""
    note = (f"onnxruntime: {inside} of its {runs} model_run events start before another has ended (concurrent "
            f"InferenceSession.run calls, on {threads} thread(s)): requests, not steps, so none is a step; the "
            "whole profile is analysed and no warm-up step left out (the runs are Session events)")
    log.warning("%s", note)
    trace.metadata[mkeys.WARNINGS] = [*trace.metadata.get(mkeys.WARNINGS, []), note]
