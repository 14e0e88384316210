from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Shape(_message.Message):
    __slots__ = ("element_type", "dimensions", "tuple_shapes")
    ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    TUPLE_SHAPES_FIELD_NUMBER: _ClassVar[int]
    element_type: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    tuple_shapes: _containers.RepeatedCompositeFieldContainer[Shape]
    def __init__(self, element_type: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., tuple_shapes: _Optional[_Iterable[_Union[Shape, _Mapping]]] = ...) -> None: ...

class OpMetadata(_message.Message):
    __slots__ = ("op_type", "op_name")
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_NAME_FIELD_NUMBER: _ClassVar[int]
    op_type: str
    op_name: str
    def __init__(self, op_type: _Optional[str] = ..., op_name: _Optional[str] = ...) -> None: ...

class WindowDimension(_message.Message):
    __slots__ = ("size", "stride", "padding_low", "padding_high", "window_dilation", "base_dilation")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    PADDING_LOW_FIELD_NUMBER: _ClassVar[int]
    PADDING_HIGH_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DILATION_FIELD_NUMBER: _ClassVar[int]
    BASE_DILATION_FIELD_NUMBER: _ClassVar[int]
    size: int
    stride: int
    padding_low: int
    padding_high: int
    window_dilation: int
    base_dilation: int
    def __init__(self, size: _Optional[int] = ..., stride: _Optional[int] = ..., padding_low: _Optional[int] = ..., padding_high: _Optional[int] = ..., window_dilation: _Optional[int] = ..., base_dilation: _Optional[int] = ...) -> None: ...

class Window(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[WindowDimension]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[WindowDimension, _Mapping]]] = ...) -> None: ...

class ConvolutionDimensionNumbers(_message.Message):
    __slots__ = ("kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions", "input_batch_dimension", "input_feature_dimension", "output_batch_dimension", "output_feature_dimension", "input_spatial_dimensions", "output_spatial_dimensions")
    KERNEL_INPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_OUTPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    INPUT_BATCH_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BATCH_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    input_batch_dimension: int
    input_feature_dimension: int
    output_batch_dimension: int
    output_feature_dimension: int
    input_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    output_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kernel_input_feature_dimension: _Optional[int] = ..., kernel_output_feature_dimension: _Optional[int] = ..., kernel_spatial_dimensions: _Optional[_Iterable[int]] = ..., input_batch_dimension: _Optional[int] = ..., input_feature_dimension: _Optional[int] = ..., output_batch_dimension: _Optional[int] = ..., output_feature_dimension: _Optional[int] = ..., input_spatial_dimensions: _Optional[_Iterable[int]] = ..., output_spatial_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class DotDimensionNumbers(_message.Message):
    __slots__ = ("lhs_contracting_dimensions", "rhs_contracting_dimensions", "lhs_batch_dimensions", "rhs_batch_dimensions")
    LHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    LHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    lhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    lhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., rhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., lhs_batch_dimensions: _Optional[_Iterable[int]] = ..., rhs_batch_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class PrecisionConfig(_message.Message):
    __slots__ = ("operand_precision",)
    OPERAND_PRECISION_FIELD_NUMBER: _ClassVar[int]
    operand_precision: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, operand_precision: _Optional[_Iterable[int]] = ...) -> None: ...

class Instruction(_message.Message):
    __slots__ = ("name", "opcode", "shape", "metadata", "fusion_kind", "dimensions", "window", "convolution_dimension_numbers", "custom_call_target", "dot_dimension_numbers", "id", "operand_ids", "called_computation_ids", "backend_config", "feature_group_count", "precision_config", "batch_group_count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPCODE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FUSION_KIND_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_TARGET_FIELD_NUMBER: _ClassVar[int]
    DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPERAND_IDS_FIELD_NUMBER: _ClassVar[int]
    CALLED_COMPUTATION_IDS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CONFIG_FIELD_NUMBER: _ClassVar[int]
    FEATURE_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    PRECISION_CONFIG_FIELD_NUMBER: _ClassVar[int]
    BATCH_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    opcode: str
    shape: Shape
    metadata: OpMetadata
    fusion_kind: str
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    window: Window
    convolution_dimension_numbers: ConvolutionDimensionNumbers
    custom_call_target: str
    dot_dimension_numbers: DotDimensionNumbers
    id: int
    operand_ids: _containers.RepeatedScalarFieldContainer[int]
    called_computation_ids: _containers.RepeatedScalarFieldContainer[int]
    backend_config: bytes
    feature_group_count: int
    precision_config: PrecisionConfig
    batch_group_count: int
    def __init__(self, name: _Optional[str] = ..., opcode: _Optional[str] = ..., shape: _Optional[_Union[Shape, _Mapping]] = ..., metadata: _Optional[_Union[OpMetadata, _Mapping]] = ..., fusion_kind: _Optional[str] = ..., dimensions: _Optional[_Iterable[int]] = ..., window: _Optional[_Union[Window, _Mapping]] = ..., convolution_dimension_numbers: _Optional[_Union[ConvolutionDimensionNumbers, _Mapping]] = ..., custom_call_target: _Optional[str] = ..., dot_dimension_numbers: _Optional[_Union[DotDimensionNumbers, _Mapping]] = ..., id: _Optional[int] = ..., operand_ids: _Optional[_Iterable[int]] = ..., called_computation_ids: _Optional[_Iterable[int]] = ..., backend_config: _Optional[bytes] = ..., feature_group_count: _Optional[int] = ..., precision_config: _Optional[_Union[PrecisionConfig, _Mapping]] = ..., batch_group_count: _Optional[int] = ...) -> None: ...

class Computation(_message.Message):
    __slots__ = ("name", "instructions", "id", "root_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    instructions: _containers.RepeatedCompositeFieldContainer[Instruction]
    id: int
    root_id: int
    def __init__(self, name: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[Instruction, _Mapping]]] = ..., id: _Optional[int] = ..., root_id: _Optional[int] = ...) -> None: ...

class Module(_message.Message):
    __slots__ = ("name", "entry_computation_name", "computations", "id", "entry_computation_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
    COMPUTATIONS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    entry_computation_name: str
    computations: _containers.RepeatedCompositeFieldContainer[Computation]
    id: int
    entry_computation_id: int
    def __init__(self, name: _Optional[str] = ..., entry_computation_name: _Optional[str] = ..., computations: _Optional[_Iterable[_Union[Computation, _Mapping]]] = ..., id: _Optional[int] = ..., entry_computation_id: _Optional[int] = ...) -> None: ...

class HloProto(_message.Message):
    __slots__ = ("hlo_module",)
    HLO_MODULE_FIELD_NUMBER: _ClassVar[int]
    hlo_module: Module
    def __init__(self, hlo_module: _Optional[_Union[Module, _Mapping]] = ...) -> None: ...
