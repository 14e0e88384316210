"""Where CUPTI puts each field of the activity records the plugin reads.

CUPTI hands activity records back in buffers: each record is the C struct of its kind
(``cupti_activity.h``), starting on an 8-byte boundary (``ACTIVITY_RECORD_ALIGNMENT``),
its first field the ``CUpti_ActivityKind`` as an int32. The struct of a kind grows
between CUPTI versions (``CUpti_ActivityKernel9`` in CUPTI 12 ... ``CUpti_ActivityKernel13``
in CUPTI 13), always by appending: every field below sits at the same offset in every
version since the one named, so the decoder reads CUPTI 12 and 13 buffers alike. How
far one record extends is CUPTI's to say (``cuptiActivityGetNextRecord``); the sizes
here (``RECORD_SIZE``) are those of the CUPTI 13 structs, used only where polyprof lays
out records itself (the tests' fake CUPTI, the binding's Python objects).

Offsets and types are those of ``cupti_activity.h`` (CUPTI_API_VERSION 130400-130500);
``tests/test_cupti.py`` checks every one against the NumPy dtypes cupti-python ships for
the same structs (``cupti.cupti.activity_kernel13_dtype`` ...). Pointer fields
(``const char *name``) are read as uint64 and resolved to text while CUPTI's strings
are alive (at buffer completion).
"""

from __future__ import annotations

from typing import NamedTuple


class Field(NamedTuple):
    offset: int
    dtype: str  # NumPy type string, little-endian


# CUpti_ActivityKind values (cupti_activity.h)
MEMCPY = 1
MEMSET = 2
KERNEL = 3
DRIVER = 4
RUNTIME = 5
DEVICE = 8
CONTEXT = 9
CONCURRENT_KERNEL = 10
NAME = 11
MARKER = 12
MARKER_DATA = 13
OVERHEAD = 17
MEMCPY2 = 22
UNIFIED_MEMORY_COUNTER = 25
SYNCHRONIZATION = 38
EXTERNAL_CORRELATION = 39

KIND_NAMES = {MEMCPY: "MEMCPY", MEMSET: "MEMSET", KERNEL: "KERNEL", DRIVER: "DRIVER", RUNTIME: "RUNTIME",
              DEVICE: "DEVICE", CONTEXT: "CONTEXT", CONCURRENT_KERNEL: "CONCURRENT_KERNEL", NAME: "NAME",
              MARKER: "MARKER", MARKER_DATA: "MARKER_DATA", OVERHEAD: "OVERHEAD", MEMCPY2: "MEMCPY2",
              UNIFIED_MEMORY_COUNTER: "UNIFIED_MEMORY_COUNTER", SYNCHRONIZATION: "SYNCHRONIZATION",
              EXTERNAL_CORRELATION: "EXTERNAL_CORRELATION"}

_U1, _U2, _U4, _I4, _U8 = "<u1", "<u2", "<u4", "<i4", "<u8"

#: CUpti_ActivityKernel13 (CUPTI 13; the same offsets since CUpti_ActivityKernel9)
KERNEL_FIELDS = {
    "registers_per_thread": Field(6, _U2), "start": Field(16, _U8), "end": Field(24, _U8),
    "device_id": Field(40, _U4), "context_id": Field(44, _U4), "stream_id": Field(48, _U4),
    "grid_x": Field(52, _I4), "grid_y": Field(56, _I4), "grid_z": Field(60, _I4),
    "block_x": Field(64, _I4), "block_y": Field(68, _I4), "block_z": Field(72, _I4),
    "static_shared_memory": Field(76, _I4), "dynamic_shared_memory": Field(80, _I4),
    "correlation_id": Field(92, _U4), "name": Field(104, _U8), "queued": Field(120, _U8),
    "submitted": Field(128, _U8), "launch_type": Field(136, _U1), "graph_node_id": Field(144, _U8),
    "graph_id": Field(156, _U4),
}
#: CUpti_ActivityMemcpy7 (the same offsets since CUpti_ActivityMemcpy5)
MEMCPY_FIELDS = {
    "copy_kind": Field(4, _U1), "src_kind": Field(5, _U1), "dst_kind": Field(6, _U1), "flags": Field(7, _U1),
    "bytes": Field(8, _U8), "start": Field(16, _U8), "end": Field(24, _U8), "device_id": Field(32, _U4),
    "context_id": Field(36, _U4), "stream_id": Field(40, _U4), "correlation_id": Field(44, _U4),
    "graph_node_id": Field(64, _U8), "graph_id": Field(72, _U4),
}
#: CUpti_ActivityMemcpyPtoP4 (peer-to-peer copies, kind MEMCPY2)
MEMCPY2_FIELDS = {
    "copy_kind": Field(4, _U1), "src_kind": Field(5, _U1), "dst_kind": Field(6, _U1), "flags": Field(7, _U1),
    "bytes": Field(8, _U8), "start": Field(16, _U8), "end": Field(24, _U8), "device_id": Field(32, _U4),
    "context_id": Field(36, _U4), "stream_id": Field(40, _U4), "src_device_id": Field(44, _U4),
    "dst_device_id": Field(52, _U4), "correlation_id": Field(60, _U4), "graph_node_id": Field(72, _U8),
    "graph_id": Field(80, _U4),
}
#: CUpti_ActivityMemset5 (the same offsets since CUpti_ActivityMemset4)
MEMSET_FIELDS = {
    "value": Field(4, _U4), "bytes": Field(8, _U8), "start": Field(16, _U8), "end": Field(24, _U8),
    "device_id": Field(32, _U4), "context_id": Field(36, _U4), "stream_id": Field(40, _U4),
    "correlation_id": Field(44, _U4), "memory_kind": Field(50, _U2), "graph_node_id": Field(64, _U8),
    "graph_id": Field(72, _U4),
}
#: CUpti_ActivityAPI (kinds DRIVER and RUNTIME)
API_FIELDS = {
    "cbid": Field(4, _U4), "start": Field(8, _U8), "end": Field(16, _U8), "process_id": Field(24, _U4),
    "thread_id": Field(28, _U4), "correlation_id": Field(32, _U4), "return_value": Field(36, _U4),
}
#: CUpti_ActivitySynchronization2 (the same offsets since CUpti_ActivitySynchronization)
SYNC_FIELDS = {
    "type": Field(4, _I4), "start": Field(8, _U8), "end": Field(16, _U8), "correlation_id": Field(24, _U4),
    "context_id": Field(28, _U4), "stream_id": Field(32, _U4), "cuda_event_id": Field(36, _U4),
}
#: CUpti_ActivityExternalCorrelation
EXTERNAL_FIELDS = {"external_kind": Field(4, _I4), "external_id": Field(8, _U8), "correlation_id": Field(16, _U4)}
#: CUpti_ActivityMarker2 (NVTX); object_id is a union: pt {process_id, thread_id} for
#: object_kind THREAD/PROCESS, dcs {device_id, context_id, stream_id} otherwise
MARKER_FIELDS = {
    "flags": Field(4, _I4), "timestamp": Field(8, _U8), "id": Field(16, _U4), "object_kind": Field(20, _I4),
    "process_id": Field(24, _U4), "thread_id": Field(28, _U4), "name": Field(40, _U8), "domain": Field(48, _U8),
}
#: CUpti_ActivityMarkerData2 (the color and category of an NVTX range or mark)
MARKER_DATA_FIELDS = {"flags": Field(4, _I4), "id": Field(8, _U4), "color": Field(24, _U4), "category": Field(28, _U4)}
#: CUpti_ActivityDevice6 (the same offsets since CUpti_ActivityDevice5)
DEVICE_FIELDS = {
    "global_memory_bandwidth": Field(8, _U8), "global_memory_size": Field(16, _U8),
    "core_clock_rate": Field(36, _U4), "num_multiprocessors": Field(44, _U4),
    "compute_capability_major": Field(104, _U4), "compute_capability_minor": Field(108, _U4),
    "id": Field(112, _U4), "name": Field(136, _U8),
}
#: CUpti_ActivityContext4 (the same offsets since CUpti_ActivityContext3)
CONTEXT_FIELDS = {"context_id": Field(4, _U4), "device_id": Field(8, _U4), "null_stream_id": Field(14, _U2)}
#: CUpti_ActivityUnifiedMemoryCounter3
UNIFIED_MEMORY_FIELDS = {
    "counter_kind": Field(4, _I4), "value": Field(8, _U8), "start": Field(16, _U8), "end": Field(24, _U8),
    "address": Field(32, _U8), "src_id": Field(40, _U4), "dst_id": Field(44, _U4), "stream_id": Field(48, _U4),
}

FIELDS: dict[int, dict[str, Field]] = {
    KERNEL: KERNEL_FIELDS, CONCURRENT_KERNEL: KERNEL_FIELDS, MEMCPY: MEMCPY_FIELDS, MEMCPY2: MEMCPY2_FIELDS,
    MEMSET: MEMSET_FIELDS, DRIVER: API_FIELDS, RUNTIME: API_FIELDS, SYNCHRONIZATION: SYNC_FIELDS,
    EXTERNAL_CORRELATION: EXTERNAL_FIELDS, MARKER: MARKER_FIELDS, MARKER_DATA: MARKER_DATA_FIELDS,
    DEVICE: DEVICE_FIELDS, CONTEXT: CONTEXT_FIELDS, UNIFIED_MEMORY_COUNTER: UNIFIED_MEMORY_FIELDS,
}

#: the struct (and cupti-python's dtype) of each kind, CUPTI 13
STRUCTS = {KERNEL: "Kernel13", CONCURRENT_KERNEL: "Kernel13", MEMCPY: "Memcpy7", MEMCPY2: "MemcpyPtoP4",
           MEMSET: "Memset5", DRIVER: "API", RUNTIME: "API", SYNCHRONIZATION: "Synchronization2",
           EXTERNAL_CORRELATION: "ExternalCorrelation", MARKER: "Marker2", MARKER_DATA: "MarkerData2",
           DEVICE: "Device6", CONTEXT: "Context4", UNIFIED_MEMORY_COUNTER: "UnifiedMemoryCounter3"}
DTYPE_NAMES = {KERNEL: "activity_kernel13_dtype", MEMCPY: "activity_memcpy7_dtype",
               MEMCPY2: "activity_memcpy_pto_p4_dtype", MEMSET: "activity_memset5_dtype",
               DRIVER: "activity_api_dtype", SYNCHRONIZATION: "activity_synchronization2_dtype",
               EXTERNAL_CORRELATION: "activity_external_correlation_dtype", MARKER: "activity_marker2_dtype",
               MARKER_DATA: "activity_marker_data2_dtype", DEVICE: "activity_device6_dtype",
               CONTEXT: "activity_context4_dtype", UNIFIED_MEMORY_COUNTER: "activity_unified_memory_counter3_dtype"}
DTYPE_NAMES[CONCURRENT_KERNEL] = DTYPE_NAMES[KERNEL]
DTYPE_NAMES[RUNTIME] = DTYPE_NAMES[DRIVER]

#: sizeof() of the CUPTI 13 structs
RECORD_SIZE = {KERNEL: 248, CONCURRENT_KERNEL: 248, MEMCPY: 112, MEMCPY2: 96, MEMSET: 104, DRIVER: 40, RUNTIME: 40,
               SYNCHRONIZATION: 56, EXTERNAL_CORRELATION: 24, MARKER: 56, MARKER_DATA: 40, DEVICE: 192,
               CONTEXT: 40, UNIFIED_MEMORY_COUNTER: 104}

#: kind -> offsets of its ``const char *`` fields, at most two (text resolved at completion)
STRING_FIELDS: dict[int, tuple[int, ...]] = {KERNEL: (104,), CONCURRENT_KERNEL: (104,), MARKER: (40, 48),
                                             DEVICE: (136,)}

# flags and enums the converter reads
MARKER_INSTANTANEOUS, MARKER_START, MARKER_END = 1 << 0, 1 << 1, 1 << 2
OBJECT_PROCESS, OBJECT_THREAD = 1, 2
MEMCPY_ASYNC = 1 << 0
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
                6: "Device Static", 7: "Managed Static"}
SYNC_TYPES = {0: "Unknown", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
UNIFIED_MEMORY_COUNTERS = {1: "Unified Memory HtoD", 2: "Unified Memory DtoH", 3: "Unified Memory CPU Page Fault",
                           4: "Unified Memory GPU Page Fault", 5: "Unified Memory Thrashing",
                           6: "Unified Memory Throttling", 7: "Unified Memory Remote Map",
                           8: "Unified Memory DtoD"}
#: CUpti_ExternalCorrelationKind
EXTERNAL_KINDS = {0: "invalid", 1: "unknown", 2: "openacc", 3: "custom0", 4: "custom1", 5: "custom2"}
THREAD_ID_TYPE_SYSTEM = 1  # CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM: thread ids are gettid()
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
ERROR_MAX_LIMIT_REACHED = 12  # CUPTI_ERROR_MAX_LIMIT_REACHED: the end of a buffer's records
ERROR_MULTIPLE_SUBSCRIBERS = 39  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
ALIGNMENT = 8  # ACTIVITY_RECORD_ALIGNMENT
