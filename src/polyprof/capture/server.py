"""The capture server inside the profiled process: ``tensorflow.ProfilerService`` over gRPC.

Nothing is recorded while it waits. A ``Profile`` call starts a polyprof session with
the usual plugins, lets the program run for the requested duration (or until
``Terminate``, the client going away, or the program ending), stops the session and
answers with the trace as an XSpace ``tool_data`` entry named ``xplane.pb``. One capture
runs at a time; the others are answered ``ALREADY_EXISTS`` at once. The server's work
runs on its own threads; errors become gRPC status messages, never exceptions in the
program.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Sequence

from ..errors import ServeError
from ..trace.identity import rank_from_env
from . import profiler_service_pb2 as pb
from .protocol import XSPACE_TOOL, generic_handler
from .security import TLSFiles, check_exposure, join_address, token_interceptor
from ..trace import metadata_keys as mkeys
from ..lowlevel import fork

if TYPE_CHECKING:
    import grpc

    from ..collect.plugin import Plugin

log = logging.getLogger("polyprof.serve")

#: the longest session id a client may give (it is logged and kept in the trace's metadata)
MAX_SESSION_ID = 256
_POLL_S = 0.05  # how often a running capture checks for an early end
_FORK_ENV = "GRPC_ENABLE_FORK_SUPPORT"


@dataclass(frozen=True)
class Limits:
    """Caps on what one capture may cost the profiled process."""

    max_duration_ms: int = 10 * 60 * 1000
    max_response_bytes: int = 1 << 30
    max_concurrent_rpcs: int = 8  # further calls are refused by gRPC (RESOURCE_EXHAUSTED)
    workers: int = 4


@dataclass
class _Capture:
    session_id: str
    peer: str
    duration_ms: int
    started: float = field(default_factory=time.monotonic)
    end: threading.Event = field(default_factory=threading.Event)
    recording: bool = False  # the session has started

    def left_s(self) -> float:
        return max(0.0, self.started + self.duration_ms / 1000 - time.monotonic())


class _Refusal(Exception):
    """A capture refused or failed for a reason the client is told (a gRPC status)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


class CaptureService:
    """The three RPCs; one capture at a time."""

    def __init__(self, plugins: Sequence[str | Plugin] | None, limits: Limits, collect_timeout: float):
        self.plugins = list(plugins) if plugins is not None else None
        self.limits = limits
        self.collect_timeout = collect_timeout
        self.closing = threading.Event()
        self._busy = threading.Lock()
        self._current: _Capture | None = None
        self.captures = 0

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler({"Profile": self.profile, "Terminate": self.terminate,
                                "Monitor": self.monitor})

    # ------------------------------------------------------------------ Profile
    def profile(self, request: pb.ProfileRequest, context: grpc.ServicerContext) -> pb.ProfileResponse:
        import grpc

        try:
            return self._profile(request, context)
        except _Refusal as r:
            context.abort(r.code, f"polyprof: {r.message}")
        except Exception as e:  # noqa: BLE001 - a status for the client, never an exception in the program
            log.debug("capture failed", exc_info=True)
            context.abort(grpc.StatusCode.INTERNAL, f"polyprof: the capture failed: {type(e).__name__}: {e}")

    def _profile(self, request: pb.ProfileRequest, context: grpc.ServicerContext) -> pb.ProfileResponse:
        import grpc

        session_id = request.session_id or request.opts.session_id
        if len(session_id) > MAX_SESSION_ID or not session_id.isprintable():
            raise _Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"session_id: at most {MAX_SESSION_ID} printable "
                                                             "characters (it is logged and kept in the trace)")
        duration = int(request.opts.duration_ms or request.duration_ms)
        cap = self.limits.max_duration_ms
        if duration > cap:
            raise _Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"duration_ms {duration} is over this server's cap of {cap} ms")
        if duration == 0:  # as TSL: 0 = until terminated; here also until the cap
            duration = cap
        if self.closing.is_set():
            raise _Refusal(grpc.StatusCode.UNAVAILABLE, "the program is ending; no capture")
        if not self._busy.acquire(blocking=False):
            cur = self._current
            doing = f" (session {cur.session_id!r} from {cur.peer}, ~{cur.left_s():.0f} s left)" if cur else ""
            raise _Refusal(grpc.StatusCode.ALREADY_EXISTS, f"busy: another capture is running{doing}; one capture at a time")
        try:
            capture = _Capture(session_id or time.strftime("%Y_%m_%d_%H_%M_%S"), context.peer(), duration)
            self._current = capture
            return self._run(capture, context)
        finally:
            self._current = None
            self._busy.release()

    def _run(self, capture: _Capture, context: grpc.ServicerContext) -> pb.ProfileResponse:
        import grpc

        from ..collect.session import Session  # a session only when a capture runs
        from ..errors import SessionError  # (as above)

        context.add_callback(capture.end.set)  # the client went away (or the call ended)
        session = Session(self.plugins, collect_timeout=self.collect_timeout)
        try:
            session.start()
        except SessionError as e:
            raise _Refusal(grpc.StatusCode.FAILED_PRECONDITION, f"cannot capture now: {e}") from None
        capture.started = time.monotonic()  # the duration counts from when recording began
        capture.recording = True
        log.info("capture %s from %s: %d ms", capture.session_id, capture.peer, capture.duration_ms)
        try:
            self._wait(capture)
        finally:
            trace = session.stop()
        self.captures += 1
        if not context.is_active():
            log.info("capture %s: the client went away; its trace is dropped", capture.session_id)
            return pb.ProfileResponse(empty_trace=True)
        trace.metadata[mkeys.CAPTURE] = {"session_id": capture.session_id, "peer": capture.peer,
                                     "requested_ms": capture.duration_ms}
        from ..writers.xspace import to_bytes  # the writer and its analyses only for a capture's answer

        data = to_bytes(trace)
        if len(data) > self.limits.max_response_bytes:
            raise _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"the trace is {_size(len(data))}, over this server's cap of "
                           f"{_size(self.limits.max_response_bytes)}; capture a shorter duration")
        return pb.ProfileResponse(empty_trace=trace.n_events == 0,
                                  tool_data=[pb.ProfileToolData(name=XSPACE_TOOL, data=data)])

    def _wait(self, capture: _Capture) -> None:
        main = threading.main_thread()
        deadline = capture.started + capture.duration_ms / 1000
        while not capture.end.is_set() and not self.closing.is_set() and main.is_alive():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            capture.end.wait(min(_POLL_S, left))

    # ------------------------------------------------------------------ the others
    def terminate(self, request: pb.TerminateRequest, context: grpc.ServicerContext) -> pb.TerminateResponse:
        cur = self._current
        if cur is not None and request.session_id == cur.session_id:
            log.info("capture %s: terminated by %s", cur.session_id, context.peer())
            cur.end.set()
        return pb.TerminateResponse()

    def monitor(self, request: pb.MonitorRequest, context: grpc.ServicerContext) -> pb.MonitorResponse:
        cur = self._current
        if cur is None:
            state = "idle"
        elif not cur.recording:
            state = f"starting session {cur.session_id!r} for {cur.peer}"
        else:
            state = f"capturing session {cur.session_id!r} for {cur.peer}, ~{cur.left_s():.1f} s left"
        rank = rank_from_env()
        text = (f"polyprof server in pid {os.getpid()} on {socket.gethostname()}"
                f"{'' if rank is None else f' (rank {rank})'}: {state}; {self.captures} captures so far")
        return pb.MonitorResponse(data=text)


class Server:
    """A running capture server (see :func:`serve`). ``address`` is what it listens on."""

    def __init__(self, grpc_server: grpc.Server, service: CaptureService, host: str, port: int, secured: str):
        self._grpc = grpc_server
        self.service = service
        self.host = host
        self.port = port
        self.secured = secured  # "none", "token", "tls", "token+tls"

    @property
    def address(self) -> str:
        return join_address(self.host, self.port)

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop serving. A capture in progress ends now and is answered with what it has,
        if that takes at most ``grace_s``; then open calls are cancelled."""
        global _server
        self.service.closing.set()
        self._grpc.stop(grace_s).wait(grace_s + 1.0)
        with _server_lock:
            if _server is self:
                _server = None

    def __repr__(self) -> str:
        return f"<polyprof.serve.Server {self.address} ({self.secured})>"


_server_lock = threading.Lock()
_server: Server | None = None


def _forget_in_child() -> None:
    global _server
    _server = None  # a forked child has the memory of the parent's server, not its threads


fork.in_child(_forget_in_child)


def current() -> Server | None:
    """The server running in this process, if any."""
    return _server


@contextmanager
def no_fork_handlers() -> Iterator[None]:
    """gRPC's fork handlers log a line to stderr on every fork() of a process with gRPC
    threads (multiprocessing, DataLoader workers): the program's output would change.
    Turn them off for gRPC as this process first loads it (it reads the variable then),
    and leave the program's environment as it was. A program that already uses gRPC
    keeps its own setting."""
    had = os.environ.get(_FORK_ENV)
    os.environ.setdefault(_FORK_ENV, "false")
    try:
        yield
    finally:
        if had is None:
            os.environ.pop(_FORK_ENV, None)


def start(host: str, port: int, *, plugins: Sequence[str | Plugin] | None, token: str | None,
          tls: TLSFiles | None, limits: Limits, collect_timeout: float) -> Server:
    global _server
    check_exposure(host, token, tls)
    with _server_lock, no_fork_handlers():
        import grpc

        if _server is not None:
            raise ServeError(f"this process already serves captures on {_server.address}")
        service = CaptureService(plugins, limits, collect_timeout)
        options = [("grpc.so_reuseport", 0),  # never share the port with another process
                   ("grpc.max_send_message_length", limits.max_response_bytes + (1 << 20)),
                   ("grpc.max_receive_message_length", 1 << 20)]
        server = grpc.server(ThreadPoolExecutor(limits.workers, thread_name_prefix="polyprof-serve"),
                             handlers=[service.handler()], options=options,
                             interceptors=[token_interceptor(token)] if token else None,
                             maximum_concurrent_rpcs=limits.max_concurrent_rpcs)
        where = join_address(host, port)
        try:
            bound = (server.add_secure_port(where, tls.server_credentials()) if tls
                     else server.add_insecure_port(where))
        except RuntimeError as e:
            bound, why = 0, str(e)
        else:
            why = "is the port in use?"
        if not bound:
            server.stop(None)
            raise ServeError(f"cannot listen on {where}: {why}")
        server.start()
        secured = "+".join(x for x, on in (("token", token), ("tls", tls)) if on) or "none"
        _server = Server(server, service, host, bound, secured)
    log.info("polyprof serves captures on %s (auth: %s)", _server.address, secured)
    return _server
