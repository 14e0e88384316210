"""The names vendors and frameworks give to what analyses look for, in one place.

Events keep their source's own names; derive/ and analyze/ recognise some of them by
these lists (lower-case substrings unless said otherwise). A new vendor's runtime is a
few strings here, as its categories are a few lines in trace/categories.py beside it.
"""

from __future__ import annotations

import re

#: host calls that block until the device catches up (CUDA, HIP, OpenCL, JAX)
SYNC_MARKERS = ("synchronize", "clfinish", "clwaitforevents", "eventsynchronize",
                "hipdevicesynchronize", "block_until_ready")
#: categories whose events are synchronisation waits
SYNC_CATEGORIES = ("cuda_sync", "sync")
#: copies that block the host (exact lower-case names: the Async ones do not)
BLOCKING_COPIES = ("cudamemcpy", "cudamemcpy2d", "cudamemcpy3d", "hipmemcpy", "hipmemcpy2d", "hipmemcpy3d")

#: host calls that enqueue device work: one with no device activity is an unmatched launch
LAUNCH_MARKERS = ("launch", "memcpy", "memset", "enqueue", "runfunction", "graphlaunch")
#: calls that launch a whole captured graph (every kernel of it shares the call's correlation id)
GRAPH_LAUNCH_MARKERS = ("graphlaunch",)

#: host calls that put one piece of device work on a stream's queue (exact names): a
#: stream's queue length counts these against the work they launched (HTA's counters)
QUEUED_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
                   "cudaMemsetAsync", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemsetAsync",
                   "hipMemcpyAsync", "hipMemcpyWithStream",
                   "runFunction - job_prep_and_submit_for_execution")
#: the category of CUPTI's range-profiler events (one per profiled kernel, its counters as
#: args), and the launch calls they pair with in order (name prefixes, as HTA matches them)
PROFILER_RANGE_CATEGORY = "cuda_profiler_range"
RANGE_LAUNCHES = ("cudaLaunchKernel",)
#: host calls during which the host waits for the device (exact names): on a critical
#: path their time is the device's, not the host's (an async copy that waits shows it by
#: its own sync record)
WAITING_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery",
                 "cudaEventSynchronize", "cudaMemcpy", "hipDeviceSynchronize", "hipStreamSynchronize",
                 "hipEventQuery", "hipEventSynchronize", "hipMemcpy")
#: host calls that record a device event on a stream (exact names)
EVENT_RECORD_CALLS = ("cudaEventRecord", "cudaEventRecordWithFlags", "hipEventRecord")
#: host calls that make a stream wait for an event recorded on another (exact names)
STREAM_WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
#: Kineto's device-side synchronisation records (``cuda_sync`` events, exact names): the
#: whole device waits, one stream waits, the host waits on an event, a stream waits on one
CONTEXT_SYNC, STREAM_SYNC, EVENT_SYNC, STREAM_WAIT_EVENT = (
    "Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")

#: stats that name the CUDA/HIP graph a launch replays or a kernel belongs to (Kineto's
#: graph launch args, nsys' and CUPTI's graphId / graphNodeId), in preference order
GRAPH_ID_STATS = ("graph id", "graphId", "graph_id")
GRAPH_EXEC_STATS = ("graph exec id", "graphExecId", "graph_exec_id")
GRAPH_NODE_STATS = ("graphNodeId", "graph node id", "graph_node_id")
#: the arg of a launch call that names its kernel (Kineto's HIP launches)
LAUNCH_KERNEL_STAT = "kernel"

#: PyTorch's step ranges, ``ProfilerStep#N`` (exact match; the group is the step number)
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: what polyprof names a step when it writes one into torch's trace
PROFILER_STEP_PREFIX = "ProfilerStep#"

#: host work that feeds the input pipeline (PyTorch DataLoader, tf.data, JAX prefetch)
INPUT_MARKERS = ("dataloader", "enumerate(", "_next_data", "input_pipeline", "iterator::", "prefetch")
