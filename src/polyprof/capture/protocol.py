"""The ProfilerService wire protocol: method paths and message types, for both sides.

TensorFlow, JAX and XProf serve and call ``tensorflow.ProfilerService``. Its messages
are in ``profiler_service.proto`` under polyprof's own package (no clash with
TensorFlow's in the descriptor pool); the service is wired here by hand, with the same
method paths, instead of through generated gRPC stubs, for the same reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from ..errors import one_line
from . import profiler_service_pb2 as pb

if TYPE_CHECKING:
    import grpc
    from google.protobuf.message import Message

log = logging.getLogger("polyprof")

SERVICE = "tensorflow.ProfilerService"

#: method name -> (request type, response type)
METHODS: dict[str, tuple[type[Message], type[Message]]] = {
    "Profile": (pb.ProfileRequest, pb.ProfileResponse),
    "Terminate": (pb.TerminateRequest, pb.TerminateResponse),
    "Monitor": (pb.MonitorRequest, pb.MonitorResponse),
}

#: the gRPC metadata key that carries the shared token (``Bearer <token>``)
TOKEN_METADATA_KEY = "authorization"

#: the name of the XSpace entry in ``ProfileResponse.tool_data``, and the file suffix
#: clients save it under (``<host>.xplane.pb``)
XSPACE_TOOL = "xplane.pb"
#: the ``plugin`` of a trace's warning that its capture was cut short (the client says it too)
CUT_SHORT = "capture"


def path(method: str) -> str:
    """The gRPC method path, e.g. ``/tensorflow.ProfilerService/Profile``."""
    return f"/{SERVICE}/{method}"


class Malformed:
    """A request whose bytes are not the method's message: handed to the method wrapper
    instead of letting gRPC log a traceback (into the profiled program's stderr)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


def _lenient(parse: Callable[[bytes], Message]) -> Callable[[bytes], Message | Malformed]:
    def deserialize(data: bytes) -> Message | Malformed:
        try:
            return parse(data)
        except Exception as e:  # noqa: BLE001 - any parse failure: answered INVALID_ARGUMENT below
            return Malformed(e)

    return deserialize


def _refusing_malformed(name: str, fn: Callable[..., Message]) -> Callable[[object, grpc.ServicerContext], Message]:
    def method(request: object, context: grpc.ServicerContext) -> Message:
        if isinstance(request, Malformed):
            import grpc

            err = f"{type(request.error).__name__}: {one_line(request.error)}"
            log.info("capture server: a malformed %s request from %s refused (%s)", name, context.peer(), err)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"polyprof: malformed {name} request ({err})")
        return fn(request, context)

    return method


def generic_handler(impl: dict[str, Callable[..., Message]]) -> grpc.GenericRpcHandler:
    """A gRPC handler serving ``impl[method](request, context)`` for each method; a
    request that does not parse is refused with INVALID_ARGUMENT and one line in
    polyprof's log (at info), never a traceback."""
    import grpc

    handlers = {}
    for name, fn in impl.items():
        req, resp = METHODS[name]
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            _refusing_malformed(name, fn), request_deserializer=_lenient(req.FromString),
            response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def stub(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable:
    """A callable for one method on ``channel`` (``stub(ch, "Profile")(request, timeout=...)``)."""
    req, resp = METHODS[method]
    return channel.unary_unary(path(method), request_serializer=req.SerializeToString,
                               response_deserializer=resp.FromString)
