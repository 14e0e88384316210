"""Classify event categories from any source into a small set of kinds.

Readers keep each source's own category strings (lossless); analyses ask this module
what kind of activity a category is, so a new vendor's names are one table entry here.
"""

from __future__ import annotations

import re
from enum import IntEnum

import numpy as np


class Kind(IntEnum):
    OTHER = 0
    KERNEL = 1  # device compute
    MEMCPY = 2  # device copy
    MEMSET = 3  # device fill
    RUNTIME = 4  # host API call (launch, copy request, sync)
    CPU_OP = 5  # framework op on the host
    ANNOTATION = 6  # user section / annotation on the host
    DEVICE_ANNOTATION = 7  # annotation projected on a device
    STEP = 8
    PYTHON = 9
    MARK = 10
    COLLECTIVE = 11  # communication kernel
    DERIVED = 12


_BY_CATEGORY: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "opencl_api": Kind.RUNTIME,
    "opencl_map": Kind.MEMCPY,  # clEnqueueMap/Unmap on the device queue
    "opencl_marker": Kind.OTHER,  # markers and barriers: zero-length queue events
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "section": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.DEVICE_ANNOTATION,
    "step": Kind.STEP,
    "python_function": Kind.PYTHON,
    "mark": Kind.MARK,
    "derived": Kind.DERIVED,
    # XSpace (JAX / TensorFlow / XProf)
    "xla_op": Kind.KERNEL,  # an HLO op executing on a device (or the CPU backend)
    "xla_module": Kind.DERIVED,  # a whole compiled program; its ops are the activity
    "traceme": Kind.CPU_OP,  # host TraceMe annotation
    "xla_runtime": Kind.RUNTIME,  # host TraceMe of XLA's/PjRt's runtime (vocabulary.XLA_RUNTIME_CALLS)
    # Nsight Systems SQLite exports (formats/nsys)
    "nvtx": Kind.ANNOTATION,  # NVTX push/pop and start/end ranges: sections
    "nvtx_mark": Kind.MARK,
    "os_runtime": Kind.OTHER,  # OSRT_API: libc/pthread calls
    "cuda_graph": Kind.OTHER,  # CUDA graph creation and node events on the host
    # rocprofv3 / rocpd (formats/rocprof_json.py, formats/rocpd)
    "hsa_api": Kind.RUNTIME,  # HSA runtime calls (what HIP calls underneath, and direct users)
    "hip_compiler": Kind.OTHER,  # __hipRegisterFunction and friends: no device work
    "rccl_api": Kind.RUNTIME,  # RCCL calls, which launch the collective kernels
    "roctx": Kind.ANNOTATION,  # ROCTx ranges: sections
    "roctx_mark": Kind.MARK,
    # rocprofv3's Perfetto output (rocprofiler-sdk's perfetto categories; formats/perfetto_read)
    "hip_api": Kind.RUNTIME,
    "kernel_dispatch": Kind.KERNEL,
    "memory_copy": Kind.MEMCPY,
    "marker_api": Kind.ANNOTATION,  # ROCTx ranges
    "memory_allocation": Kind.OTHER,
    # Kineto activity types not listed above
    "privateuse1_driver": Kind.RUNTIME,
    "glow_runtime": Kind.RUNTIME,
    "collective_comm": Kind.COLLECTIVE,
    "cpu_instant_event": Kind.MARK,
    "cuda_sync": Kind.OTHER,  # CUPTI sync records on a stream: waiting, not busy
    "cuda_profiler_range": Kind.OTHER,  # CUPTI range-profiler counters per kernel
    "mtia_ccp_events": Kind.KERNEL,  # MTIA command processor: told apart by name, see _BY_NAME
    "overhead": Kind.OTHER,
    "trace": Kind.OTHER,  # Kineto's own "PyTorch Profiler (0)" span
    "xla_op_end": Kind.OTHER,  # XLA's CPU runtime's "end: <op>" mark (formats/xspace/xla.py)
}

#: Kinds that occupy a device: the "busy" in a temporal breakdown.
DEVICE_ACTIVITY = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.COLLECTIVE)
#: Device activity that is not compute.
NON_COMPUTE = (Kind.MEMCPY, Kind.MEMSET)

#: the C++ namespaces of DeepEP's kernels (its expert-parallel all-to-all over NVLink and RDMA)
EP_NAMESPACES = ("deep_ep::", "dpsk::ep::")
_COLLECTIVE_MARKERS = ("nccl", "rccl", "allreduce", "all_reduce", "allgather", "all_gather",
                       "reducescatter", "reduce_scatter", "alltoall", "sendrecv",
                       # XLA HLO names ("broadcast" alone also names elementwise fusions, so not a marker)
                       "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                       # DeepEP's expert-parallel all-to-all kernels (dispatch, combine, their notify
                       # kernels), as released and as DeepSeek's own traces name them
                       *EP_NAMESPACES)


#: XLA HLO ops that move memory (async copies between memory spaces, plain copies):
#: a device op category like "xla_op" says nothing about that, the op's name does
_COPY_OPS = ("copy-start", "copy-done", "async-copy", "copy")


def is_copy_name(name: str) -> bool:
    """``copy-done.12``, ``copy-start``, ``copy.3``: the base name before ``.N``."""
    return name.lower().split(".", 1)[0] in _COPY_OPS


#: kernels that are a runtime's fills and copies, by how their names start: ROCm's ROCclr
#: runs ``hipMemset*`` and device-side ``hipMemcpy*`` as blit kernels of its own, which
#: Kineto and rocprof record as kernels (TraceLens's MI100 rocprof trace: 23 ms of
#: ``__amd_rocclr_fillBufferAligned`` and ``__amd_rocclr_copyBuffer`` counted as compute).
#: Their events stay kernels (HTA counts them as compute: ``--window hta`` does too); the
#: time-share analyses count them as fills and copies (``analyze/common.py: activity_class``)
BLIT_KERNELS = (("__amd_rocclr_fill", Kind.MEMSET), ("__amd_rocclr_copy", Kind.MEMCPY))


def blit_kind(name: str) -> Kind | None:
    """MEMSET or MEMCPY for a kernel :data:`BLIT_KERNELS` names, else None."""
    return next((kind for prefix, kind in BLIT_KERNELS if name.startswith(prefix)), None)


#: categories that mix kinds of activity, told apart by event name:
#: category -> ({name: kind}, kind of every other name)
_BY_NAME: dict[str, tuple[dict[str, Kind], Kind]] = {
    # MTIA's command processor: PE execution (pe_exe, merge, remote, ...) is compute,
    # DMA requests are copies, event record/wait are synchronisation (not busy)
    "mtia_ccp_events": ({"dma_request": Kind.MEMCPY, "event_record": Kind.OTHER, "event_wait": Kind.OTHER},
                        Kind.KERNEL),
}


def refine_by_name(strings: list[str], categories: np.ndarray, names: np.ndarray, kinds: np.ndarray) -> None:
    """Set ``kinds`` (one per event, in place) for events of the categories in _BY_NAME."""
    lowered = {s.lower(): i for i, s in enumerate(strings) if s.lower() in _BY_NAME}
    for cat, cid in lowered.items():
        rows = np.flatnonzero(categories == cid)
        if not len(rows):
            continue
        table, other = _BY_NAME[cat]
        uniq, inv = np.unique(names[rows], return_inverse=True)
        per_name = np.fromiter((table.get(strings[u].lower(), other) for u in uniq), np.int8, len(uniq))
        kinds[rows] = per_name[inv]


def kind_of(category: str) -> Kind:
    """Kind of one category string (case-insensitive)."""
    return _BY_CATEGORY.get(category.lower(), Kind.OTHER)


#: one search for every marker (a name is asked once per distinct device activity name)
_COLLECTIVE = re.compile("|".join(re.escape(m) for m in _COLLECTIVE_MARKERS))


def is_collective_name(name: str) -> bool:
    return _COLLECTIVE.search(name.lower()) is not None


def collective_names(names: list[str]) -> np.ndarray:
    """:func:`is_collective_name` of each of ``names``, in one search of their joined text
    (a marker holds no NUL, so no match spans two names)."""
    if not names:
        return np.zeros(0, bool)
    lows = [n.lower() for n in names]  # each on its own: lower() may change a length
    text = "\0".join(lows)
    ends = np.cumsum([len(n) + 1 for n in lows])  # one past each name's NUL
    out = np.zeros(len(names), bool)
    hits = [m.start() for m in _COLLECTIVE.finditer(text)]
    if hits:
        out[np.searchsorted(ends, hits, side="right")] = True
    return out


#: a matrix library's kernel, by its name: cuBLAS / cuBLASLt (``gemm``, ``xmma``, Hopper's
#: ``nvjet``), CUTLASS, cuDNN and MIOpen convolutions, rocBLAS / hipBLASLt's Tensile
#: kernels (``Cijk_``)
MATRIX_KERNEL = re.compile(r"gemm|xmma|nvjet|cutlass|cublas|matmul|cudnn|conv(?!ert)|cijk_", re.IGNORECASE)


def kinds_for_strings(strings: list[str]) -> np.ndarray:
    """Kind code for every entry of a string table (vectorised lookups use this)."""
    return np.fromiter((kind_of(s) for s in strings), dtype=np.int8, count=len(strings))
