"""Well-known names: stat keys, categories, plane and line names.

Readers and plugins write these keys so analyses work on any source. A stat key not
listed here is still kept; these are the ones analyses understand.
"""

from __future__ import annotations

# --- stat keys (per event) -------------------------------------------------------
CORRELATION_ID = "correlation_id"  # host launch <-> device activity
EXTERNAL_ID = "external_id"  # framework op <-> the launches it made
STREAM = "stream"  # device stream / queue number
DEVICE = "device"  # device index
QUEUE = "queue"  # command-queue name (OpenCL)
SECTION = "section"  # host section active at launch (projection)
STEP = "step"  # step number
OP = "op"  # framework op name
NAME_SCOPE = "name_scope"  # hierarchical scope, "a/b/c"
MODULE = "module"  # compiled program (XLA module, Triton kernel source...)
SOURCE = "source"  # file:line or function
BYTES = "bytes"  # bytes moved by a transfer
COPY_KIND = "copy kind"  # a copy's direction where the source names it: HtoD, DtoH, DtoD, PtoP...
SRC_KIND, DST_KIND = "src kind", "dst kind"  # memory kind of a copy's ends: Pageable, Pinned, Device...
FLOPS = "flops"
GRID = "grid"  # global work size / grid, as "x,y,z"
BLOCK = "block"  # local work size / block, as "x,y,z"
REGISTERS = "registers per thread"  # a kernel's registers per thread (Kineto's arg name)
SHARED_MEMORY = "shared memory"  # a kernel's shared memory per block, bytes (static + dynamic)
INPUT_DIMS = "Input Dims"  # a framework op's input shapes, JSON text (torch's record_shapes)
INPUT_TYPE = "Input type"  # a framework op's input dtypes, JSON text
CONCRETE_INPUTS = "Concrete Inputs"  # a framework op's scalar inputs as text, JSON text
BYTES_ACCESSED = "bytes_accessed"  # bytes an op reads and writes (XLA's cost analysis)
#: the number format of an op's ``flops`` (fp32, tf32, bf16...): written by polyprof's
#: Kineto/Chrome export beside the FLOPs it counted from an XSpace's HLO (writers/kineto.py)
FLOPS_PRECISION = "flops_precision"
INCOMPLETE = "incomplete"  # 1 when an event was cut short (e.g. open at stop)
THREAD_ID = "tid"
PROGRAM_ID = "program_id"
HLO_OP = "hlo_op"
HLO_MODULE = "hlo_module"
#: XProf's category of an XLA op on a TPU (``loop fusion``, ``copy-done``, ``all-reduce``)
HLO_CATEGORY = "hlo_category"
#: stats that name a device activity's compiled module / op / source, in preference order
MODULE_STATS = (HLO_MODULE, MODULE, "kernel_module")

# --- categories written by polyprof itself ------------------------------------------
CAT_SECTION = "section"  # polyprof.section()
CAT_MARK = "mark"  # polyprof.mark()
CAT_STEP = "step"  # polyprof.step() and ProfilerStep#N
CAT_KERNEL = "kernel"
CAT_MEMCPY = "gpu_memcpy"
CAT_MEMSET = "gpu_memset"
CAT_RUNTIME = "runtime"  # host API call that enqueues device work
CAT_CPU_OP = "cpu_op"
CAT_SYNC = "sync"  # host waits for device
CAT_DERIVED = "derived"

# --- plane names -------------------------------------------------------------------
HOST_PLANE = "/host:CPU"


def device_plane(kind: str, index: int) -> str:
    """XSpace-style plane name, e.g. ``/device:GPU:0``."""
    return f"/device:{kind}:{index}"


# --- derived line names (as XProf names them) ---------------------------------------
LINE_STEPS = "Steps"
LINE_SECTIONS = "Sections"
LINE_FRAMEWORK_OPS = "Framework Ops"
LINE_NAME_SCOPE = "Framework Name Scope"
#: the line id of XProf's derived "Steps" line on a device plane (tsl ``kThreadIdStepInfo``
#: = ``kThreadIdDerivedMin``, 0xdeadbeef as a C++ ``int``: negative in the file); the
#: lines XProf derives have the ids from it to it + 31 (``IsDerivedThreadId``)
LINE_STEPS_ID = 0xDEADBEEF - (1 << 32)
LINE_XLA_MODULES = "XLA Modules"
LINE_XLA_OPS = "XLA Ops"
LINE_SOURCE = "Source code"

# --- added by the OpenCL plugin ------------------------------------------------------
KERNEL = "kernel"  # kernel a host launch call enqueued
QUEUE_DELAY = "queue_delay_ns"  # device start - queued (time a command waited in its queue)
SUBMIT_DELAY = "submit_delay_ns"  # submit - queued, on the device clock
WAITS_FOR = "waits_for"  # on a wait call: correlation id of the latest command it waited for
BLOCKING = "blocking"  # 1 on a host call that returned only after its command completed
WAIT_LIST = "wait_list"  # on device work: correlation ids of the commands it waited for ("3,7", OpenCL)

# --- memory (docs/analysis.md, "Memory") -------------------------------------------
# An allocation or a free is an instant event (dur 0) with an ALLOC_BYTES stat, on the
# host thread that made it (so its op and section are the spans around it); any source
# that writes these stats gets the memory analyses.
ALLOC_BYTES = "alloc_bytes"  # bytes allocated (> 0) or freed (< 0) by this event
ADDR = "addr"  # address or handle of the block: pairs an allocation with its free
TOTAL_ALLOCATED = "total_allocated"  # the allocator's bytes in use just after the event
TOTAL_RESERVED = "total_reserved"  # the allocator's bytes reserved (cached) just after the event
MEMORY_DEVICE = "memory_device"  # plane name of the device the memory is on (absent: the event's plane)
ALLOCATOR = "allocator"  # which allocator: "torch", "opencl", a native plugin's name...
MEMORY_CATEGORY = "memory_category"  # what the block holds (e.g. activation, gradient), where known
STACK = "stack"  # the call stack an event was made from, as text, outermost first (a memory snapshot's frames)
CAT_MEMORY = "memory"  # category of allocation/free events that polyprof's plugins write

# --- well-known counters (Trace.counters names) --------------------------------------
COUNTER_RSS = "process.rss_bytes"  # resident set size of the profiled process (host plugin)
COUNTER_ALLOCATED = "memory.allocated_bytes"  # per device/allocator, derived from memory events
COUNTER_RESERVED = "memory.reserved_bytes"  # per device/allocator, where the source gives it
