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

#: host TraceMe events of XLA's, PjRt's and TSL's runtime (JAX and TensorFlow's XLA), as
#: name prefixes (case-sensitive, after a leading ``[N] `` device index): running a
#: compiled program, its buffers, events, streams and thread pools, not the user's ops.
#: The user's jitted function (``PjitFunction(step)``) and TensorFlow's ops are not here.
XLA_RUNTIME_CALLS = (
    # PjRt clients and executables (common, C API, StreamExecutor, TFRT, CPU)
    "PjRt", "PJRT_", "CommonPjRt", "TfrtTpuLoadedExecutable", "Scheduled TfrtTpuLoadedExecutable", "TfrtTpuBuffer",
    "TfrtTpuClient", "TfrtCpu", "ThenExecuteCallback",
    "BufferSequencingEvent::", "LocalDeviceState::", "DeviceMemAllocator::", "PythonRefManager::",
    "ComputeSemaphoreAcquire", "GetEventForComputeStreamSyncPoint", "AllocateOutputBuffer", "Handle outputs",
    "MakeOutputBuffers", "RecordUsage", "Build buffer allocations", "Handle inputs", "Handle input event recording",
    "ParseArguments", "Wait for donation holds", "Wait for usage holds", "Resolve constant globals",
    "D2H Dispatch", "H2D Dispatch", "D2H Copy From Staging Buffer", "PCIe/Memcpy Dispatch", "CreateCallbackStream",
    # XLA's executables and thunks (GPU, CPU), their CUDA/HIP host callbacks
    "GpuExecutable::", "Thunks::", "command_buffer::", "ThunkExecutor::", "cuLaunchHostFunc", "hipLaunchHostFunc",
    # TSL: thread pools, the BFC allocator's records (read as memory events: formats/xprof_memory.py)
    "ThreadpoolListener::", "SlinkyThreadPool::", "MemoryAllocation", "MemoryDeallocation",
    # TPU runtime (tpu_inference_2; XProf's HostEventType names CompleteCallbacks, DoEnqueue*Program)
    "tpu::System::", "Acquire semaphore", "Release semaphore", "MapDmaBuffer", "CompleteCallbacks", "LoadProgram",
    "ActualLoad", "CopyProgramsToSharedMemory", "EnqueueContinuationProgram", "DoEnqueue", "DeferredTpuAllocator::",
    "AllocateDestinationBuffer",
    # PjRt's host layout changes of transfers (TransposePlan, TPU linearization)
    "TransposePlan::", "Transpose::", "ParallelTranspose", "XlaLinearize", "XlaDelinearize", "Linearize", "Delinearize",
)
#: (XLA's compiler, ``backend_compile``, ``TfrtTpuCompiler::Compile``, ``XLA::TPU run hlo
#: passes`` and its passes, is not here: its time is the user's to act on, as a recompile)
#: the TraceMe of an XLA module's run (``jit_step:XLA GPU module``): it and the thunks
#: it runs on its thread (named by their HLO instructions: ``command_buffer_1``,
#: ``loop_reduce_fusion.2``) are runtime too
XLA_MODULE_RUN = re.compile(r":XLA [A-Z]+ module$")
#: host TraceMe events XLA's CUPTI tracer makes of CUPTI's own overhead records (named
#: by their CUPTI_ACTIVITY_OVERHEAD kind; ``<UNKNOWN>`` where CUPTI gives none): the
#: profiler's cost, not the program's ops (Kineto's ``overhead`` category), read so where
#: the XSpace has a GPU plane
CUPTI_OVERHEAD_NAMES = frozenset(("BUFFER_FLUSH", "COMPILER", "INSTRUMENTATION", "RESOURCE", "<UNKNOWN>"))
#: categories of runtime calls that never enqueue device work themselves, whatever their
#: names (``PjRtStreamExecutorLoadedExecutable::EnqueueExecution``, ``cuLaunchHostFunc``):
#: XLA's own TraceMe events (formats/xspace/gpu.py ``runtime_calls``); the API calls that
#: launch carry a correlation id and are ``cuda_runtime``/``hip_runtime``
NOT_LAUNCH_CATEGORIES = ("xla_runtime",)

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
#: host calls that wait for every command enqueued before them on their queue (exact
#: names; the queue: stat ``queue``), and calls that wait for the commands of the events
#: they name (stat ``waits_for``): the critical path links them to that device work and
#: gives them its time, as WAITING_CALLS, where it finds the work (analyze/wait_links.py)
QUEUE_WAIT_CALLS = ("clFinish",)
EVENT_WAIT_CALLS = ("clWaitForEvents",)
#: XLA's CPU runtime: the program's thread waiting for the ops it ran on XLA's worker
#: threads (exact names): on a critical path their time is those ops' (analyze/xla_links.py)
XLA_WAIT_CALLS = ("ThunkExecutor::Execute (wait for completion)",)
#: PjRt's reads of a device buffer into host memory (``np.asarray``, ``jax.device_get``
#: on a GPU), exact names: the reading call (``CommonPjRtBuffer::ToLiteral``, a TraceMe
#: producer context ``_p``/``_pt``) hands the transfer to a PjRt worker thread, which
#: runs it once the buffer is ready (the dispatch, that context's consumer) and launches
#: the device-to-host copy; the reading thread, waiting meanwhile in no event, resumes
#: with the copy out of the staging buffer. The critical path links the dispatch to the
#: device work it waited for and the resumption to the copy (analyze/wait_links.py)
XLA_TRANSFER_DISPATCHES = ("D2H Dispatch",)
XLA_TRANSFER_RESUMES = ("D2H Copy From Staging Buffer",)
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

#: XLA's collective HLO ops, as its instructions are named (exact, lower-case: the base
#: op, an async op's ``-start`` / ``-done`` half, a ``.N`` number): ``all-reduce.2``,
#: ``all-gather-start.1``, ``collective-permute-done``. Not its passes' names
#: (``all-reduce-combiner``) nor the ops' completion marks (``end: all-reduce.2``).
XLA_COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                      "collective-permute", "collective-broadcast")
XLA_COLLECTIVE_OP = (r"^(" + "|".join(re.escape(o) for o in XLA_COLLECTIVE_OPS)
                     + r")(-start|-done)?(?:\.\d+)*$")  # (a pattern: compiled on first use, re's cache)

#: PyTorch's step ranges, ``ProfilerStep#N`` (exact match; the group is the step number)
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: what polyprof names a step when it writes one into torch's trace
PROFILER_STEP_PREFIX = "ProfilerStep#"

#: host work that feeds the input pipeline (PyTorch DataLoader, tf.data, flax/JAX's
#: prefetch_to_device, prefetching loaders), lower-case substrings. Not any "prefetch":
#: CUDA's ``cudaMemPrefetchAsync`` (unified memory) and a build tool's
#: ``context.prefetchInputs`` (Bazel) are not input pipelines
INPUT_MARKERS = ("dataloader", "enumerate(", "_next_data", "input_pipeline", "iterator::", "prefetch_to_device",
                 "prefetchdataset", "prefetchloader", "prefetcher")

#: torch.compile's metadata marks: ``CompileEventLogger.add_record_function_data`` records
#: an empty ``record_function`` named ``<event>_data: <key>=<value>, ...`` beside its
#: timed events (``compile_file (dynamo_timed)``), metadata, not a section of the program
TORCH_METADATA_MARKS = r"^[\w.<>\[\] ]+_data: \w+="  # (compiled on first use)
