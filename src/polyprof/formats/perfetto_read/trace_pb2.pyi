from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Trace(_message.Message):
    __slots__ = ("packet",)
    PACKET_FIELD_NUMBER: _ClassVar[int]
    packet: _containers.RepeatedCompositeFieldContainer[TracePacket]
    def __init__(self, packet: _Optional[_Iterable[_Union[TracePacket, _Mapping]]] = ...) -> None: ...

class TracePacket(_message.Message):
    __slots__ = ("timestamp", "timestamp_clock_id", "trusted_packet_sequence_id", "trusted_pid", "sequence_flags", "incremental_state_cleared", "previous_packet_dropped", "first_packet_on_sequence", "interned_data", "trace_packet_defaults", "track_event", "track_descriptor", "process_descriptor", "thread_descriptor", "clock_snapshot", "process_tree", "gpu_render_stage_event", "gpu_counter_event", "streaming_profile_packet", "chrome_events")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_PACKET_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_PID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_STATE_CLEARED_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_PACKET_DROPPED_FIELD_NUMBER: _ClassVar[int]
    FIRST_PACKET_ON_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INTERNED_DATA_FIELD_NUMBER: _ClassVar[int]
    TRACE_PACKET_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_FIELD_NUMBER: _ClassVar[int]
    TRACK_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    PROCESS_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    THREAD_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    PROCESS_TREE_FIELD_NUMBER: _ClassVar[int]
    GPU_RENDER_STAGE_EVENT_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNTER_EVENT_FIELD_NUMBER: _ClassVar[int]
    STREAMING_PROFILE_PACKET_FIELD_NUMBER: _ClassVar[int]
    CHROME_EVENTS_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    timestamp_clock_id: int
    trusted_packet_sequence_id: int
    trusted_pid: int
    sequence_flags: int
    incremental_state_cleared: bool
    previous_packet_dropped: int
    first_packet_on_sequence: bool
    interned_data: InternedData
    trace_packet_defaults: TracePacketDefaults
    track_event: TrackEvent
    track_descriptor: TrackDescriptor
    process_descriptor: ProcessDescriptor
    thread_descriptor: ThreadDescriptor
    clock_snapshot: ClockSnapshot
    process_tree: ProcessTree
    gpu_render_stage_event: GpuRenderStageEvent
    gpu_counter_event: GpuCounterEvent
    streaming_profile_packet: StreamingProfilePacket
    chrome_events: ChromeEventBundle
    def __init__(self, timestamp: _Optional[int] = ..., timestamp_clock_id: _Optional[int] = ..., trusted_packet_sequence_id: _Optional[int] = ..., trusted_pid: _Optional[int] = ..., sequence_flags: _Optional[int] = ..., incremental_state_cleared: _Optional[bool] = ..., previous_packet_dropped: _Optional[int] = ..., first_packet_on_sequence: _Optional[bool] = ..., interned_data: _Optional[_Union[InternedData, _Mapping]] = ..., trace_packet_defaults: _Optional[_Union[TracePacketDefaults, _Mapping]] = ..., track_event: _Optional[_Union[TrackEvent, _Mapping]] = ..., track_descriptor: _Optional[_Union[TrackDescriptor, _Mapping]] = ..., process_descriptor: _Optional[_Union[ProcessDescriptor, _Mapping]] = ..., thread_descriptor: _Optional[_Union[ThreadDescriptor, _Mapping]] = ..., clock_snapshot: _Optional[_Union[ClockSnapshot, _Mapping]] = ..., process_tree: _Optional[_Union[ProcessTree, _Mapping]] = ..., gpu_render_stage_event: _Optional[_Union[GpuRenderStageEvent, _Mapping]] = ..., gpu_counter_event: _Optional[_Union[GpuCounterEvent, _Mapping]] = ..., streaming_profile_packet: _Optional[_Union[StreamingProfilePacket, _Mapping]] = ..., chrome_events: _Optional[_Union[ChromeEventBundle, _Mapping]] = ...) -> None: ...

class StreamingProfilePacket(_message.Message):
    __slots__ = ("timestamp_delta_us",)
    TIMESTAMP_DELTA_US_FIELD_NUMBER: _ClassVar[int]
    timestamp_delta_us: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, timestamp_delta_us: _Optional[_Iterable[int]] = ...) -> None: ...

class ChromeEventBundle(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.RepeatedCompositeFieldContainer[ChromeMetadata]
    def __init__(self, metadata: _Optional[_Iterable[_Union[ChromeMetadata, _Mapping]]] = ...) -> None: ...

class ChromeMetadata(_message.Message):
    __slots__ = ("name", "string_value", "bool_value", "int_value", "json_value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    JSON_VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    string_value: str
    bool_value: bool
    int_value: int
    json_value: str
    def __init__(self, name: _Optional[str] = ..., string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., json_value: _Optional[str] = ...) -> None: ...

class TracePacketDefaults(_message.Message):
    __slots__ = ("timestamp_clock_id", "track_event_defaults")
    TIMESTAMP_CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    timestamp_clock_id: int
    track_event_defaults: TrackEventDefaults
    def __init__(self, timestamp_clock_id: _Optional[int] = ..., track_event_defaults: _Optional[_Union[TrackEventDefaults, _Mapping]] = ...) -> None: ...

class TrackEventDefaults(_message.Message):
    __slots__ = ("track_uuid", "extra_counter_track_uuids", "extra_double_counter_track_uuids")
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_DOUBLE_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    track_uuid: int
    extra_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    extra_double_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, track_uuid: _Optional[int] = ..., extra_counter_track_uuids: _Optional[_Iterable[int]] = ..., extra_double_counter_track_uuids: _Optional[_Iterable[int]] = ...) -> None: ...

class TrackEvent(_message.Message):
    __slots__ = ("category_iids", "categories", "name_iid", "name", "type", "track_uuid", "counter_value", "double_counter_value", "extra_counter_track_uuids", "extra_counter_values", "extra_double_counter_track_uuids", "extra_double_counter_values", "flow_ids_old", "flow_ids", "terminating_flow_ids_old", "terminating_flow_ids", "debug_annotations", "timestamp_delta_us", "timestamp_absolute_us", "thread_time_delta_us", "thread_time_absolute_us", "thread_instruction_count_delta", "thread_instruction_count_absolute", "legacy_event")
    class LegacyEvent(_message.Message):
        __slots__ = ("name_iid", "phase", "duration_us", "bind_id", "flow_direction", "instant_event_scope", "pid_override", "tid_override")
        NAME_IID_FIELD_NUMBER: _ClassVar[int]
        PHASE_FIELD_NUMBER: _ClassVar[int]
        DURATION_US_FIELD_NUMBER: _ClassVar[int]
        BIND_ID_FIELD_NUMBER: _ClassVar[int]
        FLOW_DIRECTION_FIELD_NUMBER: _ClassVar[int]
        INSTANT_EVENT_SCOPE_FIELD_NUMBER: _ClassVar[int]
        PID_OVERRIDE_FIELD_NUMBER: _ClassVar[int]
        TID_OVERRIDE_FIELD_NUMBER: _ClassVar[int]
        name_iid: int
        phase: int
        duration_us: int
        bind_id: int
        flow_direction: int
        instant_event_scope: int
        pid_override: int
        tid_override: int
        def __init__(self, name_iid: _Optional[int] = ..., phase: _Optional[int] = ..., duration_us: _Optional[int] = ..., bind_id: _Optional[int] = ..., flow_direction: _Optional[int] = ..., instant_event_scope: _Optional[int] = ..., pid_override: _Optional[int] = ..., tid_override: _Optional[int] = ...) -> None: ...
    CATEGORY_IIDS_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_VALUES_FIELD_NUMBER: _ClassVar[int]
    EXTRA_DOUBLE_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_DOUBLE_COUNTER_VALUES_FIELD_NUMBER: _ClassVar[int]
    FLOW_IDS_OLD_FIELD_NUMBER: _ClassVar[int]
    FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FLOW_IDS_OLD_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_DELTA_US_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_ABSOLUTE_US_FIELD_NUMBER: _ClassVar[int]
    THREAD_TIME_DELTA_US_FIELD_NUMBER: _ClassVar[int]
    THREAD_TIME_ABSOLUTE_US_FIELD_NUMBER: _ClassVar[int]
    THREAD_INSTRUCTION_COUNT_DELTA_FIELD_NUMBER: _ClassVar[int]
    THREAD_INSTRUCTION_COUNT_ABSOLUTE_FIELD_NUMBER: _ClassVar[int]
    LEGACY_EVENT_FIELD_NUMBER: _ClassVar[int]
    category_iids: _containers.RepeatedScalarFieldContainer[int]
    categories: _containers.RepeatedScalarFieldContainer[str]
    name_iid: int
    name: str
    type: int
    track_uuid: int
    counter_value: int
    double_counter_value: float
    extra_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    extra_counter_values: _containers.RepeatedScalarFieldContainer[int]
    extra_double_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    extra_double_counter_values: _containers.RepeatedScalarFieldContainer[float]
    flow_ids_old: _containers.RepeatedScalarFieldContainer[int]
    flow_ids: _containers.RepeatedScalarFieldContainer[int]
    terminating_flow_ids_old: _containers.RepeatedScalarFieldContainer[int]
    terminating_flow_ids: _containers.RepeatedScalarFieldContainer[int]
    debug_annotations: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    timestamp_delta_us: int
    timestamp_absolute_us: int
    thread_time_delta_us: int
    thread_time_absolute_us: int
    thread_instruction_count_delta: int
    thread_instruction_count_absolute: int
    legacy_event: TrackEvent.LegacyEvent
    def __init__(self, category_iids: _Optional[_Iterable[int]] = ..., categories: _Optional[_Iterable[str]] = ..., name_iid: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[int] = ..., track_uuid: _Optional[int] = ..., counter_value: _Optional[int] = ..., double_counter_value: _Optional[float] = ..., extra_counter_track_uuids: _Optional[_Iterable[int]] = ..., extra_counter_values: _Optional[_Iterable[int]] = ..., extra_double_counter_track_uuids: _Optional[_Iterable[int]] = ..., extra_double_counter_values: _Optional[_Iterable[float]] = ..., flow_ids_old: _Optional[_Iterable[int]] = ..., flow_ids: _Optional[_Iterable[int]] = ..., terminating_flow_ids_old: _Optional[_Iterable[int]] = ..., terminating_flow_ids: _Optional[_Iterable[int]] = ..., debug_annotations: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ..., timestamp_delta_us: _Optional[int] = ..., timestamp_absolute_us: _Optional[int] = ..., thread_time_delta_us: _Optional[int] = ..., thread_time_absolute_us: _Optional[int] = ..., thread_instruction_count_delta: _Optional[int] = ..., thread_instruction_count_absolute: _Optional[int] = ..., legacy_event: _Optional[_Union[TrackEvent.LegacyEvent, _Mapping]] = ...) -> None: ...

class DebugAnnotation(_message.Message):
    __slots__ = ("name_iid", "name", "bool_value", "uint_value", "int_value", "double_value", "pointer_value", "legacy_json_value", "string_value", "string_value_iid", "dict_entries", "array_values")
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    POINTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    LEGACY_JSON_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_IID_FIELD_NUMBER: _ClassVar[int]
    DICT_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ARRAY_VALUES_FIELD_NUMBER: _ClassVar[int]
    name_iid: int
    name: str
    bool_value: bool
    uint_value: int
    int_value: int
    double_value: float
    pointer_value: int
    legacy_json_value: str
    string_value: str
    string_value_iid: int
    dict_entries: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    array_values: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    def __init__(self, name_iid: _Optional[int] = ..., name: _Optional[str] = ..., bool_value: _Optional[bool] = ..., uint_value: _Optional[int] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., pointer_value: _Optional[int] = ..., legacy_json_value: _Optional[str] = ..., string_value: _Optional[str] = ..., string_value_iid: _Optional[int] = ..., dict_entries: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ..., array_values: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ...) -> None: ...

class TrackDescriptor(_message.Message):
    __slots__ = ("uuid", "parent_uuid", "name", "static_name", "atrace_name", "process", "thread", "counter", "sibling_order_rank")
    UUID_FIELD_NUMBER: _ClassVar[int]
    PARENT_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATIC_NAME_FIELD_NUMBER: _ClassVar[int]
    ATRACE_NAME_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    SIBLING_ORDER_RANK_FIELD_NUMBER: _ClassVar[int]
    uuid: int
    parent_uuid: int
    name: str
    static_name: str
    atrace_name: str
    process: ProcessDescriptor
    thread: ThreadDescriptor
    counter: CounterDescriptor
    sibling_order_rank: int
    def __init__(self, uuid: _Optional[int] = ..., parent_uuid: _Optional[int] = ..., name: _Optional[str] = ..., static_name: _Optional[str] = ..., atrace_name: _Optional[str] = ..., process: _Optional[_Union[ProcessDescriptor, _Mapping]] = ..., thread: _Optional[_Union[ThreadDescriptor, _Mapping]] = ..., counter: _Optional[_Union[CounterDescriptor, _Mapping]] = ..., sibling_order_rank: _Optional[int] = ...) -> None: ...

class ProcessDescriptor(_message.Message):
    __slots__ = ("pid", "cmdline", "process_name", "process_labels")
    PID_FIELD_NUMBER: _ClassVar[int]
    CMDLINE_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    PROCESS_LABELS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    cmdline: _containers.RepeatedScalarFieldContainer[str]
    process_name: str
    process_labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pid: _Optional[int] = ..., cmdline: _Optional[_Iterable[str]] = ..., process_name: _Optional[str] = ..., process_labels: _Optional[_Iterable[str]] = ...) -> None: ...

class ThreadDescriptor(_message.Message):
    __slots__ = ("pid", "tid", "thread_name", "reference_timestamp_us", "reference_thread_time_us", "reference_thread_instruction_count")
    PID_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TIMESTAMP_US_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_THREAD_TIME_US_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_THREAD_INSTRUCTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    tid: int
    thread_name: str
    reference_timestamp_us: int
    reference_thread_time_us: int
    reference_thread_instruction_count: int
    def __init__(self, pid: _Optional[int] = ..., tid: _Optional[int] = ..., thread_name: _Optional[str] = ..., reference_timestamp_us: _Optional[int] = ..., reference_thread_time_us: _Optional[int] = ..., reference_thread_instruction_count: _Optional[int] = ...) -> None: ...

class CounterDescriptor(_message.Message):
    __slots__ = ("type", "categories", "unit", "unit_name", "unit_multiplier", "is_incremental")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_NAME_FIELD_NUMBER: _ClassVar[int]
    UNIT_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    IS_INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    type: int
    categories: _containers.RepeatedScalarFieldContainer[str]
    unit: int
    unit_name: str
    unit_multiplier: int
    is_incremental: bool
    def __init__(self, type: _Optional[int] = ..., categories: _Optional[_Iterable[str]] = ..., unit: _Optional[int] = ..., unit_name: _Optional[str] = ..., unit_multiplier: _Optional[int] = ..., is_incremental: _Optional[bool] = ...) -> None: ...

class InternedData(_message.Message):
    __slots__ = ("event_categories", "event_names", "debug_annotation_names", "debug_annotation_string_values", "graphics_contexts", "gpu_specifications", "gpu_counter_descriptors")
    EVENT_CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    EVENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATION_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATION_STRING_VALUES_FIELD_NUMBER: _ClassVar[int]
    GRAPHICS_CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    GPU_SPECIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNTER_DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    event_categories: _containers.RepeatedCompositeFieldContainer[EventCategory]
    event_names: _containers.RepeatedCompositeFieldContainer[EventName]
    debug_annotation_names: _containers.RepeatedCompositeFieldContainer[DebugAnnotationName]
    debug_annotation_string_values: _containers.RepeatedCompositeFieldContainer[InternedString]
    graphics_contexts: _containers.RepeatedCompositeFieldContainer[InternedGraphicsContext]
    gpu_specifications: _containers.RepeatedCompositeFieldContainer[InternedGpuRenderStageSpecification]
    gpu_counter_descriptors: _containers.RepeatedCompositeFieldContainer[InternedGpuCounterDescriptor]
    def __init__(self, event_categories: _Optional[_Iterable[_Union[EventCategory, _Mapping]]] = ..., event_names: _Optional[_Iterable[_Union[EventName, _Mapping]]] = ..., debug_annotation_names: _Optional[_Iterable[_Union[DebugAnnotationName, _Mapping]]] = ..., debug_annotation_string_values: _Optional[_Iterable[_Union[InternedString, _Mapping]]] = ..., graphics_contexts: _Optional[_Iterable[_Union[InternedGraphicsContext, _Mapping]]] = ..., gpu_specifications: _Optional[_Iterable[_Union[InternedGpuRenderStageSpecification, _Mapping]]] = ..., gpu_counter_descriptors: _Optional[_Iterable[_Union[InternedGpuCounterDescriptor, _Mapping]]] = ...) -> None: ...

class EventCategory(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class EventName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class DebugAnnotationName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class InternedString(_message.Message):
    __slots__ = ("iid", "str")
    IID_FIELD_NUMBER: _ClassVar[int]
    STR_FIELD_NUMBER: _ClassVar[int]
    iid: int
    str: bytes
    def __init__(self, iid: _Optional[int] = ..., str: _Optional[bytes] = ...) -> None: ...

class ClockSnapshot(_message.Message):
    __slots__ = ("clocks", "primary_trace_clock")
    class Clock(_message.Message):
        __slots__ = ("clock_id", "timestamp", "is_incremental", "unit_multiplier_ns")
        CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        IS_INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
        UNIT_MULTIPLIER_NS_FIELD_NUMBER: _ClassVar[int]
        clock_id: int
        timestamp: int
        is_incremental: bool
        unit_multiplier_ns: int
        def __init__(self, clock_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., is_incremental: _Optional[bool] = ..., unit_multiplier_ns: _Optional[int] = ...) -> None: ...
    CLOCKS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_TRACE_CLOCK_FIELD_NUMBER: _ClassVar[int]
    clocks: _containers.RepeatedCompositeFieldContainer[ClockSnapshot.Clock]
    primary_trace_clock: int
    def __init__(self, clocks: _Optional[_Iterable[_Union[ClockSnapshot.Clock, _Mapping]]] = ..., primary_trace_clock: _Optional[int] = ...) -> None: ...

class ProcessTree(_message.Message):
    __slots__ = ("processes", "threads")
    class Process(_message.Message):
        __slots__ = ("pid", "ppid", "cmdline")
        PID_FIELD_NUMBER: _ClassVar[int]
        PPID_FIELD_NUMBER: _ClassVar[int]
        CMDLINE_FIELD_NUMBER: _ClassVar[int]
        pid: int
        ppid: int
        cmdline: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, pid: _Optional[int] = ..., ppid: _Optional[int] = ..., cmdline: _Optional[_Iterable[str]] = ...) -> None: ...
    class Thread(_message.Message):
        __slots__ = ("tid", "name", "tgid")
        TID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        TGID_FIELD_NUMBER: _ClassVar[int]
        tid: int
        name: str
        tgid: int
        def __init__(self, tid: _Optional[int] = ..., name: _Optional[str] = ..., tgid: _Optional[int] = ...) -> None: ...
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessTree.Process]
    threads: _containers.RepeatedCompositeFieldContainer[ProcessTree.Thread]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessTree.Process, _Mapping]]] = ..., threads: _Optional[_Iterable[_Union[ProcessTree.Thread, _Mapping]]] = ...) -> None: ...

class GpuRenderStageEvent(_message.Message):
    __slots__ = ("event_id", "duration", "hw_queue_iid", "stage_iid", "gpu_id", "context", "submission_id", "extra_data", "name", "name_iid", "hw_queue_id", "stage_id", "specifications")
    class ExtraData(_message.Message):
        __slots__ = ("name", "value")
        NAME_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        name: str
        value: str
        def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class Specifications(_message.Message):
        __slots__ = ("hw_queue", "stage")
        class Description(_message.Message):
            __slots__ = ("name", "description")
            NAME_FIELD_NUMBER: _ClassVar[int]
            DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
            name: str
            description: str
            def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...
        HW_QUEUE_FIELD_NUMBER: _ClassVar[int]
        STAGE_FIELD_NUMBER: _ClassVar[int]
        hw_queue: _containers.RepeatedCompositeFieldContainer[GpuRenderStageEvent.Specifications.Description]
        stage: _containers.RepeatedCompositeFieldContainer[GpuRenderStageEvent.Specifications.Description]
        def __init__(self, hw_queue: _Optional[_Iterable[_Union[GpuRenderStageEvent.Specifications.Description, _Mapping]]] = ..., stage: _Optional[_Iterable[_Union[GpuRenderStageEvent.Specifications.Description, _Mapping]]] = ...) -> None: ...
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    HW_QUEUE_IID_FIELD_NUMBER: _ClassVar[int]
    STAGE_IID_FIELD_NUMBER: _ClassVar[int]
    GPU_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_DATA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    HW_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SPECIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    duration: int
    hw_queue_iid: int
    stage_iid: int
    gpu_id: int
    context: int
    submission_id: int
    extra_data: _containers.RepeatedCompositeFieldContainer[GpuRenderStageEvent.ExtraData]
    name: str
    name_iid: int
    hw_queue_id: int
    stage_id: int
    specifications: GpuRenderStageEvent.Specifications
    def __init__(self, event_id: _Optional[int] = ..., duration: _Optional[int] = ..., hw_queue_iid: _Optional[int] = ..., stage_iid: _Optional[int] = ..., gpu_id: _Optional[int] = ..., context: _Optional[int] = ..., submission_id: _Optional[int] = ..., extra_data: _Optional[_Iterable[_Union[GpuRenderStageEvent.ExtraData, _Mapping]]] = ..., name: _Optional[str] = ..., name_iid: _Optional[int] = ..., hw_queue_id: _Optional[int] = ..., stage_id: _Optional[int] = ..., specifications: _Optional[_Union[GpuRenderStageEvent.Specifications, _Mapping]] = ...) -> None: ...

class InternedGpuRenderStageSpecification(_message.Message):
    __slots__ = ("iid", "name", "description", "category")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    description: str
    category: int
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., category: _Optional[int] = ...) -> None: ...

class InternedGraphicsContext(_message.Message):
    __slots__ = ("iid", "pid", "api")
    IID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    iid: int
    pid: int
    api: int
    def __init__(self, iid: _Optional[int] = ..., pid: _Optional[int] = ..., api: _Optional[int] = ...) -> None: ...

class GpuCounterEvent(_message.Message):
    __slots__ = ("counter_descriptor", "counter_descriptor_iid", "counters", "gpu_id")
    class GpuCounter(_message.Message):
        __slots__ = ("counter_id", "int_value", "double_value")
        COUNTER_ID_FIELD_NUMBER: _ClassVar[int]
        INT_VALUE_FIELD_NUMBER: _ClassVar[int]
        DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
        counter_id: int
        int_value: int
        double_value: float
        def __init__(self, counter_id: _Optional[int] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ...) -> None: ...
    COUNTER_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    COUNTER_DESCRIPTOR_IID_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    GPU_ID_FIELD_NUMBER: _ClassVar[int]
    counter_descriptor: GpuCounterDescriptor
    counter_descriptor_iid: int
    counters: _containers.RepeatedCompositeFieldContainer[GpuCounterEvent.GpuCounter]
    gpu_id: int
    def __init__(self, counter_descriptor: _Optional[_Union[GpuCounterDescriptor, _Mapping]] = ..., counter_descriptor_iid: _Optional[int] = ..., counters: _Optional[_Iterable[_Union[GpuCounterEvent.GpuCounter, _Mapping]]] = ..., gpu_id: _Optional[int] = ...) -> None: ...

class InternedGpuCounterDescriptor(_message.Message):
    __slots__ = ("iid", "counter_descriptor", "gpu_id")
    IID_FIELD_NUMBER: _ClassVar[int]
    COUNTER_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    GPU_ID_FIELD_NUMBER: _ClassVar[int]
    iid: int
    counter_descriptor: GpuCounterDescriptor
    gpu_id: int
    def __init__(self, iid: _Optional[int] = ..., counter_descriptor: _Optional[_Union[GpuCounterDescriptor, _Mapping]] = ..., gpu_id: _Optional[int] = ...) -> None: ...

class GpuCounterDescriptor(_message.Message):
    __slots__ = ("specs",)
    class GpuCounterSpec(_message.Message):
        __slots__ = ("counter_id", "name", "description", "value_direction")
        COUNTER_ID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
        VALUE_DIRECTION_FIELD_NUMBER: _ClassVar[int]
        counter_id: int
        name: str
        description: str
        value_direction: int
        def __init__(self, counter_id: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., value_direction: _Optional[int] = ...) -> None: ...
    SPECS_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[GpuCounterDescriptor.GpuCounterSpec]
    def __init__(self, specs: _Optional[_Iterable[_Union[GpuCounterDescriptor.GpuCounterSpec, _Mapping]]] = ...) -> None: ...
