"""The ProfilerService wire protocol: method paths and message types, for both sides.

TensorFlow, JAX and XProf serve and call ``tensorflow.ProfilerService``. Its messages
are in ``profiler_service.proto`` under polyprof's own package (no clash with
TensorFlow's in the descriptor pool); the service is wired here by hand, with the same
method paths, instead of through generated gRPC stubs, for the same reason.
"""

from __future__ import annotations

from typing import Any, Callable

from . import profiler_service_pb2 as pb

SERVICE = "tensorflow.ProfilerService"

#: method name -> (request type, response type)
METHODS: dict[str, tuple[Any, Any]] = {
    "Profile": (pb.ProfileRequest, pb.ProfileResponse),
    "Terminate": (pb.TerminateRequest, pb.TerminateResponse),
    "Monitor": (pb.MonitorRequest, pb.MonitorResponse),
}

#: the gRPC metadata key that carries the shared token (``Bearer <token>``)
TOKEN_METADATA_KEY = "authorization"

#: the name of the XSpace entry in ``ProfileResponse.tool_data``, and the file suffix
#: clients save it under (``<host>.xplane.pb``)
XSPACE_TOOL = "xplane.pb"


def path(method: str) -> str:
    """The gRPC method path, e.g. ``/tensorflow.ProfilerService/Profile``."""
    return f"/{SERVICE}/{method}"


def generic_handler(impl: dict[str, Callable[[Any, Any], Any]]) -> Any:
    """A gRPC handler serving ``impl[method](request, context)`` for each method."""
    import grpc

    handlers = {}
    for name, fn in impl.items():
        req, resp = METHODS[name]
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def stub(channel: Any, method: str) -> Any:
    """A callable for one method on ``channel`` (``stub(ch, "Profile")(request, timeout=...)``)."""
    req, resp = METHODS[method]
    return channel.unary_unary(path(method), request_serializer=req.SerializeToString,
                               response_deserializer=resp.FromString)
