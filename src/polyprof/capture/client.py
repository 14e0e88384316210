"""The capture client: ask one or several profiler servers (polyprof, TensorFlow, JAX)
for a trace of the next N ms, all at once, and get each one's XSpace back.

A polyprof server answers with the XSpace in the response. TensorFlow's and JAX's
servers (TSL) write it to ``<repository_root>/<session_id>/<host_name>.xplane.pb`` on
their own machine instead; the client points ``repository_root`` at a private temporary
directory and reads the file from there, which works when the server runs on this
machine (its usual setting: ``jax.profiler.start_server`` listens on every interface
without authentication, so it is best reached through loopback or an SSH tunnel).
"""

from __future__ import annotations

import re
import secrets
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .. import logs
from ..errors import CaptureError
from . import profiler_service_pb2 as pb
from .protocol import CUT_SHORT, XSPACE_TOOL, stub
from ..trace import metadata_keys as mkeys
from .security import TLSFiles, split_address, token_metadata

if TYPE_CHECKING:
    import grpc

    from ..trace.core import Trace

log = logs.kept("polyprof.capture")

MAX_ADDRESSES = 256
MAX_PARALLEL = 32
DEFAULT_GRACE_S = 90.0  # on top of the duration: the server stops, collects (30 s cap) and converts
#: how long a client turned away by a full server (it listens, but closes the connection:
#: its connection cap, docs/capture.md) tries again before it gives up
TURNED_AWAY_PATIENCE_S = 15.0


@dataclass
class Captured:
    """What one server answered: the serialized XSpace, or why there is none."""

    address: str
    data: bytes | None = None
    error: str | None = None
    via: str = ""  # "response" (polyprof) or "repository" (TSL servers)
    cut: str = ""  # why it holds less than the time asked, when it does (the server's warning)

    @property
    def ok(self) -> bool:
        return self.data is not None

    def trace(self) -> Trace:
        """The capture as a polyprof Trace."""
        if self.data is None:
            raise CaptureError(f"{self.address}: {self.error}")
        from ..formats.xspace import from_bytes  # the XSpace reader only when a capture is read
        from ..trace.identity import identify  # (as above)

        trace = identify(from_bytes(self.data, source=f"capture of {self.address}"), label=self.address)
        self.cut = next((str(w["message"]) for w in trace.metadata.get(mkeys.WARNINGS) or []
                         if isinstance(w, dict) and w.get("plugin") == CUT_SHORT), "")
        return trace


def request_for(duration_ms: int, session_id: str, repository_root: str, host_name: str) -> pb.ProfileRequest:
    """A ProfileRequest as TSL's own client fills it (host and device tracing on)."""
    req = pb.ProfileRequest(duration_ms=duration_ms, session_id=session_id, repository_root=repository_root,
                            host_name=host_name, tools=[XSPACE_TOOL])
    o = req.opts
    o.version, o.duration_ms, o.session_id = 1, duration_ms, session_id
    o.host_tracer_level, o.device_tracer_level, o.python_tracer_level = 2, 1, 0
    return req


def capture(addresses: Sequence[str], duration_ms: int, *, token: str | None = None,
            tls: TLSFiles | None = None, session_id: str | None = None,
            grace_s: float = DEFAULT_GRACE_S, max_bytes: int = 2**31 - 1) -> list[Captured]:
    """Capture every server in ``addresses`` (``HOST:PORT``) over the same ``duration_ms``.
    Returns one :class:`Captured` per address, in order; failures carry their message."""
    addresses = [a.strip() for a in addresses if a.strip()]
    if not addresses:
        raise CaptureError("no address to capture (expected HOST:PORT[,HOST:PORT...])")
    if len(addresses) > MAX_ADDRESSES:
        raise CaptureError(f"{len(addresses)} addresses: at most {MAX_ADDRESSES} at once")
    if not 0 < duration_ms < 2**63:  # (the request's field: an int64 of milliseconds)
        raise CaptureError(f"duration {duration_ms} ms: expected a whole number of milliseconds from 1 to 2**63 - 1")
    for a in addresses:
        try:
            split_address(a)
        except Exception as e:
            raise CaptureError(str(e)) from None
    session_id = session_id or time.strftime("%Y_%m_%d_%H_%M_%S")
    channels = [_channel(a, tls, max_bytes) for a in addresses]
    pool = ThreadPoolExecutor(min(MAX_PARALLEL, len(addresses)), thread_name_prefix="polyprof-capture")
    try:
        futures = [pool.submit(_one, a, ch, duration_ms, session_id, token, grace_s)
                   for a, ch in zip(addresses, channels)]
        return [f.result() for f in futures]
    finally:  # also on Ctrl-C: closing a channel cancels its call, and the server stops recording
        for ch in channels:
            ch.close()
        pool.shutdown(wait=True)


def _channel(address: str, tls: TLSFiles | None, max_bytes: int) -> grpc.Channel:
    import grpc

    options = [("grpc.max_receive_message_length", max_bytes), ("grpc.enable_retries", 0),
               # a server that turned this client away is tried again soon (see _call)
               ("grpc.initial_reconnect_backoff_ms", 250), ("grpc.min_reconnect_backoff_ms", 250),
               ("grpc.max_reconnect_backoff_ms", 1000)]
    return (grpc.secure_channel(address, tls.channel_credentials(), options=options) if tls
            else grpc.insecure_channel(address, options=options))


def _one(address: str, channel: grpc.Channel, duration_ms: int, session_id: str, token: str | None,
         grace_s: float) -> Captured:
    import grpc

    host_name = re.sub(r"[^A-Za-z0-9._-]", "_", address) + "-" + secrets.token_hex(4)
    repo = tempfile.mkdtemp(prefix="polyprof-capture-")
    states: list[grpc.ChannelConnectivity] = []  # whether the call reached a server (describe_rpc_error)
    channel.subscribe(states.append)
    try:
        response = _call(address, channel, request_for(duration_ms, session_id, repo, host_name),
                         duration_ms / 1000 + grace_s, token)
        return _read_response(address, response, Path(repo) / session_id)
    except grpc.RpcError as e:
        return Captured(address, error=describe_rpc_error(e, address, duration_ms / 1000 + grace_s,
                                                          connected=grpc.ChannelConnectivity.READY in states))
    except ValueError as e:  # a channel closed under the call (Ctrl-C)
        return Captured(address, error=f"cancelled ({e})")
    finally:
        channel.unsubscribe(states.append)
        shutil.rmtree(repo, ignore_errors=True)


def _call(address: str, channel: grpc.Channel, request: pb.ProfileRequest, timeout_s: float,
          token: str | None) -> pb.ProfileResponse:
    """The Profile call; tried again for up to TURNED_AWAY_PATIENCE_S while the server
    turns the connection away (a flood holds its connections: they time out in seconds)."""
    import grpc

    start = time.monotonic()
    while True:
        left = start + timeout_s - time.monotonic()
        try:
            return stub(channel, "Profile")(request, timeout=max(left, 0.001), metadata=token_metadata(token))
        except grpc.RpcError as e:
            waited = time.monotonic() - start
            if waited > TURNED_AWAY_PATIENCE_S or waited + 1 > timeout_s or not _turned_away(e, address):
                raise
            log.info("%s: the server turned the connection away (%s); trying again", address, e.details())
            time.sleep(0.25)


#: what gRPC says when the server closed the connection (not an answer of the server's):
#: also "tcp handshaker shutdown", a connection closed before its HTTP/2 handshake ended
#: (a server at its cap, or one whose handshake timeout passed on a loaded machine);
#: a TLS failure (a wrong CA or certificate) is final, whatever else its text says
_TCP_HANDSHAKE = "tcp handshaker shutdown"
_CONNECTION_FAILED = ("socket closed", "connection reset", "broken pipe", _TCP_HANDSHAKE)
_TLS_FAILED = ("ssl", "tls", "certificate", "handshake")
#: what gRPC tells the client of a call the server cancelled as it stopped (its grace over)
_SERVER_STOPPED = "cancelling all calls"


def _turned_away(e: grpc.RpcError, address: str) -> bool:
    """The connection failed although something listens at ``address``: a server at its
    connection cap accepts a connection and closes it. (Nothing listening, a server's own
    UNAVAILABLE answer and every other status are final.)"""
    import grpc

    code = e.code() if hasattr(e, "code") else None
    details = ((e.details() if hasattr(e, "details") else "") or "").lower()
    if code != grpc.StatusCode.UNAVAILABLE or not any(m in details for m in _CONNECTION_FAILED) \
            or any(m in details.replace(_TCP_HANDSHAKE, "") for m in _TLS_FAILED):
        return False  # (an answer of the server's own: "polyprof: ...", TSL's "another session")
    return _listening(address)


def _listening(address: str) -> bool:
    """Whether something accepts a connection at ``address`` now."""
    try:
        with socket.create_connection(split_address(address), timeout=2):
            return True
    except OSError:
        return False


def _read_response(address: str, response: pb.ProfileResponse, saved_dir: Path) -> Captured:
    for tool in response.tool_data:
        if tool.name == XSPACE_TOOL or tool.name.endswith("." + XSPACE_TOOL):
            return Captured(address, data=bytes(tool.data), via="response")
    if response.empty_trace:
        return Captured(address, error="the server recorded no events (empty trace)")
    files = sorted(saved_dir.glob(f"*.{XSPACE_TOOL}")) if saved_dir.is_dir() else []
    if files:
        return Captured(address, data=files[0].read_bytes(), via="repository")
    return Captured(address, error="the server saved its trace on its own machine (TensorFlow/JAX "
                                   "servers write to the client's repository_root), not in the "
                                   "response; capture it from that machine")


def describe_rpc_error(e: BaseException, address: str, timeout_s: float, connected: bool = False) -> str:
    """One line for a failed call: what the server (or gRPC) said. UNAVAILABLE is no
    server, unless the call had reached one (``connected``: the channel was ready): then
    the connection ended under it, because the program ended or was killed during the
    capture (nothing listens there now) or the server closed it. gRPC's details then say
    "Connection reset by peer", "Socket closed" or "Connection refused", by how it last
    tried; the first two also mean a server had accepted the connection. "Cancelling all
    calls" is the server's own stop cancelling the call: the program ended during the
    capture and its answer was not ready within the server's exit grace (server.py)."""
    code = e.code() if hasattr(e, "code") else None
    details = (e.details() if hasattr(e, "details") else str(e)) or ""
    name = getattr(code, "name", "ERROR")
    if name == "UNAVAILABLE" and _SERVER_STOPPED in details.lower():
        return (f"the program serving at {address} ended (or stopped its server) during the capture, and its "
                f"answer was not ready within the time a program's end waits for it (exit_grace_s, 30 s unless "
                f"the program set it: docs/capture.md), so it is lost ({details}); capture a shorter duration, "
                f"or one that ends before the program does")
    if name == "UNAVAILABLE":
        low = details.lower()  # a connection reset or closed was one a server had accepted
        reached = connected or any(m in low for m in (*_CONNECTION_FAILED, "stream removed"))
        listening = reached and _listening(address)
        if not reached or (not connected and not listening and _TCP_HANDSHAKE in low):
            return f"no profiler server answers at {address} ({details})"  # (no handshake ever ended)
        if listening:
            return (f"the server at {address} closed the connection ({details}): it ended the capture, or turned "
                    "the connection away at its connection cap (docs/capture.md)")
        return (f"the program serving at {address} ended or was killed during the capture, which is lost (the "
                f"connection ended under the call, and nothing listens there now: {details})")
    if name == "DEADLINE_EXCEEDED":
        return f"no answer within {timeout_s:.0f} s"
    if name == "UNIMPLEMENTED":
        return f"{address} is not a profiler server (UNIMPLEMENTED: {details})"
    return f"{name}: {details}"
