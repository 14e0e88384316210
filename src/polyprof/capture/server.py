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

import os
import socket
import threading
import time
# loaded now, not first during a capture's stop (pandas imports it): its exit hook is then
# registered before the server's (_stop_at_exit runs first), and not refused as python
# ends ("can't register atexit after shutdown": a capture the program's end stopped)
import concurrent.futures.thread  # noqa: F401
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Sequence

from .. import logs
from ..errors import ServeError
from ..trace.identity import rank_from_env
from . import profiler_service_pb2 as pb
from .pool import DaemonPool
from .protocol import CUT_SHORT, XSPACE_TOOL, generic_handler
from .security import TLSFiles, check_exposure, join_address, token_interceptor
from ..trace import metadata_keys as mkeys
from ..lowlevel import fork
from ..collect.clock import now_ns

if TYPE_CHECKING:
    import grpc
    import numpy as np

    from ..collect.plugin import Plugin
    from ..trace.core import Trace

log = logs.kept("polyprof.serve")

#: the longest session id a client may give (it is logged and kept in the trace's metadata)
MAX_SESSION_ID = 256
_POLL_S = 0.05  # how often a running capture checks for an early end
#: a start-up of the plugins longer than this is said in the capture's warnings
SLOW_START_S = 1.0
#: how long a stop waits for the calls in flight when no capture runs (a Monitor's answer;
#: a client that trickles its request in holds the program's end no longer than this)
IDLE_GRACE_S = 1.0


@dataclass(frozen=True)
class Limits:
    """Caps on what one capture may cost the profiled process."""

    max_duration_ms: int = 10 * 60 * 1000
    max_response_bytes: int = 1 << 30
    max_concurrent_rpcs: int = 8  # further calls are refused by gRPC (RESOURCE_EXHAUSTED)
    workers: int = 4
    max_connections: int = 64  # and at most 1/8 of the process's file descriptor limit
    handshake_timeout_ms: int = 5_000  # a connection that says nothing is closed after this
    idle_timeout_ms: int = 60_000  # a connection without calls is closed after this
    #: how long the program's end waits for the answer of a capture in progress (its
    #: session's stop, the window, the XSpace's encoding); past it the call is cancelled
    exit_grace_s: float = 30.0


def connection_cap(limits: Limits, fd_limit: int | None = None) -> int:
    """How many connections the server may hold open: ``limits.max_connections``, and at
    most 1/8 of the process's soft ``RLIMIT_NOFILE`` so that a flood of connections can
    never take the program's own file descriptors (at least 4)."""
    if fd_limit is None:
        try:
            import resource

            fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if fd_limit == resource.RLIM_INFINITY:
                fd_limit = None
        except (ImportError, OSError, ValueError):
            fd_limit = None
    cap = limits.max_connections
    if fd_limit is not None and fd_limit > 0:
        cap = min(cap, fd_limit // 8)
    return max(4, cap)


def grpc_options(limits: Limits) -> list[tuple[str, int]]:
    """The gRPC core channel arguments of the server (each checked with a connection
    flood: tests/test_capture_flood.py)."""
    return [("grpc.so_reuseport", 0),  # never share the port with another process
            ("grpc.max_send_message_length", limits.max_response_bytes + (1 << 20)),
            ("grpc.max_receive_message_length", 1 << 20),
            # connections beyond the cap are accepted and closed at once: the server's
            # file descriptors stay bounded whatever connects
            ("grpc.max_allowed_incoming_connections", connection_cap(limits)),
            ("grpc.server_handshake_timeout_ms", limits.handshake_timeout_ms),
            ("grpc.max_connection_idle_ms", limits.idle_timeout_ms)]


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

    @property
    def answering(self) -> bool:
        """A capture is running, or making its answer."""
        return self._busy.locked()

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
            if self.closing.is_set():  # (again: a stop that saw no capture running gives it no grace)
                raise _Refusal(grpc.StatusCode.UNAVAILABLE, "the program is ending; no capture")
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
        log.info("capture %s from %s: %d ms", capture.session_id, capture.peer, capture.duration_ms)
        notes: list[str] = []
        with logs.diverted(notes):  # the capture's warnings go in its trace, not the program's stderr
            # the program runs on after the capture: the sections open at its stop are kept, cut
            # there (collect/opened.py), and then at the window's end (window())
            session = Session(self.plugins, collect_timeout=self.collect_timeout,
                              options={"host": {"keep_open_sections": True}})
            asked = now_ns()
            try:
                session.start()
            except SessionError as e:
                raise _Refusal(grpc.StatusCode.FAILED_PRECONDITION, f"cannot capture now: {e}") from None
            opened = now_ns()  # every plugin records from here: the window opens (see window())
            capture.started = time.monotonic()  # the duration counts from when recording began
            capture.recording = True
            why = "the capture failed"
            try:
                why = self._wait(capture)
            finally:
                closed = min(now_ns(), opened + capture.duration_ms * 1_000_000)
                trace = session.stop()
        trace = window(trace, opened, closed, opened - asked)
        if why:  # cut short: the trace says so, as the client does (a rate over -d would be off)
            trace.metadata.setdefault(mkeys.WARNINGS, []).append({"plugin": CUT_SHORT, "message": (
                f"the capture holds {(closed - opened) / 1e9:.3g} s of the {capture.duration_ms / 1000:.3g} s "
                f"asked: {why}")})
        said = mkeys.warning_texts(trace.metadata)
        trace.metadata.setdefault(mkeys.WARNINGS, []).extend(  # each once: "plugin torch: x" is "torch: x"
            n for n in notes if not any(n in w or w in n for w in said))
        self.captures += 1
        if not context.is_active():
            log.info("capture %s: the client went away; its trace is dropped", capture.session_id)
            return pb.ProfileResponse(empty_trace=True)
        trace.metadata[mkeys.CAPTURE] = {"session_id": capture.session_id, "peer": capture.peer,
                                         "requested_ms": capture.duration_ms,
                                         **trace.metadata.get(mkeys.CAPTURE, {})}  # window() put the window's
        from ..writers.xspace import to_bytes  # the writer and its analyses only for a capture's answer

        data = to_bytes(trace)
        if len(data) > self.limits.max_response_bytes:
            raise _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"the trace is {_size(len(data))}, over this server's cap of "
                           f"{_size(self.limits.max_response_bytes)}; capture a shorter duration")
        return pb.ProfileResponse(empty_trace=trace.n_events == 0,
                                  tool_data=[pb.ProfileToolData(name=XSPACE_TOOL, data=data)])

    def _wait(self, capture: _Capture) -> str:
        """Wait out the capture's duration; why it ended before it ("": it did not)."""
        main = threading.main_thread()
        deadline = capture.started + capture.duration_ms / 1000
        while True:
            if capture.end.is_set():
                return "it was ended by its client (terminated, or gone)"
            if self.closing.is_set() or not main.is_alive():
                return "the program ended, or was stopped, before its end"
            left = deadline - time.monotonic()
            if left <= 0:
                return ""
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


def window(trace: Trace, opened: int, closed: int, startup_ns: int) -> Trace:
    """The capture's trace: what overlaps its window [opened, closed] on the session clock,
    from when every plugin records (the session's start() returned) for the requested
    duration, or less where the capture ended early. The host plugin records from the
    session's start, before the device plugins (torch.profiler's first start in a process
    takes seconds): without this its sections would span that start-up too, the device's
    events not. As a ``--delay``/``--duration`` window (collect/schedule.py): events that
    overlap the window are kept whole, counter samples in it kept (and each counter's last
    before it); the session's start and stop are the window's, and the step marks cut by
    its edges are cut to it and numbered from it (step 0 is the window's first, from its
    start, as a session's: :func:`_number_from_window`), as are the sections open at the session's stop (stat ``open_at_stop``: the program
    runs on, collect/opened.py) at its end. ``capture`` in the metadata gets
    ``window_ns`` and ``startup_s``, and a start-up over :data:`SLOW_START_S` is a warning."""
    # the subsets and steps only when a capture ends (a server that waits loads none of it)
    import numpy as np

    from ..derive.steps import find_steps  # (the same reason)
    from ..trace.subset import in_windows, take  # (the same reason)

    out = take(trace, in_windows(trace, [(opened, closed)]), counter_ranges=[(opened, closed)],
               level_at_start=True)  # each counter's level at the window's start
    steps = find_steps(out)
    ev, rows = out.events, steps.rows
    ends = ev["start_ns"][rows] + ev["dur_ns"][rows]
    ev["start_ns"][rows] = np.maximum(ev["start_ns"][rows], opened)
    ev["dur_ns"][rows] = np.maximum(np.minimum(ends, closed) - ev["start_ns"][rows], 0)
    _number_from_window(out)
    cut = _open_at_stop(out)  # the sections open at the session's stop end at the window's end
    ev["dur_ns"][cut] = np.maximum(np.minimum(ev["start_ns"][cut] + ev["dur_ns"][cut], closed) - ev["start_ns"][cut], 0)
    session = out.metadata.get(mkeys.SESSION)
    if isinstance(session, dict):
        session.update(start_ns=opened, stop_ns=closed)
    startup_s = round(startup_ns / 1e9, 3)
    out.metadata[mkeys.CAPTURE] = {"window_ns": [opened, closed], "startup_s": startup_s}
    if startup_s > SLOW_START_S:
        note = (f"the plugins took {startup_s:.3g} s to start (a profiler's first start in a process is slow); the "
                f"trace holds the {(closed - opened) / 1e9:.3g} s from when every plugin recorded, and the program "
                f"ran {startup_s:.3g} s longer under the profiler")
        out.metadata.setdefault(mkeys.WARNINGS, []).append({"plugin": "session", "message": note})
        log.info("%s", note)
    return out


def _number_from_window(trace: Trace) -> None:
    """polyprof's own steps (``polyprof.step()``'s, and those a plugin detects: events
    ``step N`` of category step with the stat ``step`` = N) numbered from the window: its
    first, the step the capture began in, is step 0. The session counts them from its
    start, before the plugins' start-up, which the window leaves out: before, a torch
    program's first capture (3.7 s of start-up) began at step 19, a later one at step 0.
    Other step marks (a program's own ``ProfilerStep#N``) keep the program's numbers."""
    import numpy as np  # (as window())

    from ..trace import keys  # (the same reason)

    col = trace.stats.get(keys.STEP)
    cat = trace.string_id(keys.CAT_STEP)
    if col is None or not len(col) or cat < 0 or col.values.dtype.kind not in "iu":
        return
    ev, values = trace.events, np.asarray(col.values, np.int64)
    names = ev["name"][col.rows]
    ours = (ev["category"][col.rows] == cat) & np.array(
        [trace.strings[n] == f"step {v}" for n, v in zip(names.tolist(), values.tolist())], bool)
    if not ours.any() or (first := int(values[ours].min())) == 0:
        return
    new = values.copy()
    new[ours] -= first
    col.values = new.astype(col.values.dtype)
    ev["name"][col.rows[ours]] = [trace.intern(f"step {v}") for v in new[ours].tolist()]


def _open_at_stop(trace: Trace) -> np.ndarray:
    """The rows of the sections the host plugin recorded cut at the session's stop."""
    import numpy as np  # (as window())

    from ..collect.opened import OPEN_AT_STOP  # (the same reason)

    col = trace.stats.get(OPEN_AT_STOP)
    if col is None:
        return np.zeros(0, np.int64)
    return col.rows[np.asarray(col.values).astype(bool)].astype(np.int64)


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

    def stop(self, grace_s: float | None = None) -> None:
        """Stop serving. A capture in progress ends now and is answered with what it
        recorded, if its stop and encoding take at most ``grace_s`` (None: the server's
        ``Limits.exit_grace_s``); then its call is cancelled, and the thread still making
        its answer (a daemon thread: pool.py) holds nothing. With no capture running, the
        other calls get at most :data:`IDLE_GRACE_S`. Called by the end of the program
        too (:func:`_stop_at_exit`)."""
        global _server
        grace = self.service.limits.exit_grace_s if grace_s is None else max(0.0, float(grace_s))
        self.service.closing.set()  # (from here no capture begins: one running holds _busy)
        if not self.service.answering:
            grace = min(grace, IDLE_GRACE_S)
        self._grpc.stop(grace).wait(grace + 1.0)
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


def _stop_at_exit() -> None:
    """Python's end stops the server (once the main thread has ended: a capture in
    progress has ended then, ``CaptureService._wait``): the capture's answer is waited
    for at most ``Limits.exit_grace_s``. Run among threading's exit hooks, before python
    joins the program's threads and before the ``atexit`` callbacks (a library's
    teardown must not run under a plugin's stop: torch's, JAX's)."""
    server = _server
    if server is not None:
        server.stop()


_exit_hook: list[bool] = []


def _stop_at_exit_once() -> None:
    """Register :func:`_stop_at_exit` once per process (a forked child inherits it and
    has no server: it does nothing there)."""
    if _exit_hook:
        return
    # threading's own exit hooks (concurrent.futures' is one) run as python ends, before
    # the atexit callbacks; atexit where this python has none
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(_stop_at_exit)
        else:
            import atexit  # (only where threading has no exit hooks of its own)

            atexit.register(_stop_at_exit)
    except RuntimeError:  # python is ending already: nothing to wait for
        return
    _exit_hook.append(True)


def current() -> Server | None:
    """The server running in this process, if any."""
    return _server


#: set for gRPC as polyprof first loads it (gRPC reads them then), unless the environment
#: sets them: its fork handlers log a line to stderr on every fork() of a process with
#: gRPC threads (multiprocessing, DataLoader workers), and its core logs errors (a
#: refused TLS handshake, a connection flood) to stderr: the program's output would change
_GRPC_ENV = {"GRPC_ENABLE_FORK_SUPPORT": "false", "GRPC_VERBOSITY": "NONE"}


@contextmanager
def quiet_grpc() -> Iterator[None]:
    """Load gRPC without its fork handlers and its own log lines (see ``_GRPC_ENV``),
    and leave the program's environment as it was. A program that sets either variable
    keeps its own setting; one that loaded gRPC first keeps what it loaded."""
    added = [k for k in _GRPC_ENV if k not in os.environ]
    for k in added:
        os.environ[k] = _GRPC_ENV[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _prepare_plugins(plugins: Sequence[str | Plugin] | None) -> None:
    """What must be in place from the program's start for a capture to record it:
    OpenCL queues made with profiling on (plugins/opencl/early.py), else a capture of a
    program that made its queues before would get host calls only."""
    names = None if plugins is None else {p if isinstance(p, str) else getattr(p, "name", "") for p in plugins}
    if names is None or "opencl" in names:
        from ..plugins.opencl.early import profile_queues  # only a server that may capture OpenCL loads it

        profile_queues()


def start(host: str, port: int, *, plugins: Sequence[str | Plugin] | None, token: str | None,
          tls: TLSFiles | None, limits: Limits, collect_timeout: float) -> Server:
    global _server
    check_exposure(host, token, tls)
    with _server_lock, quiet_grpc():
        import grpc

        if _server is not None:
            raise ServeError(f"this process already serves captures on {_server.address}")
        service = CaptureService(plugins, limits, collect_timeout)
        pool = DaemonPool(limits.workers, "polyprof-serve")  # gRPC calls its submit() only
        server = grpc.server(pool,  # type: ignore[arg-type]  # (typed as a ThreadPoolExecutor)
                             handlers=[service.handler()], options=grpc_options(limits),
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
        _prepare_plugins(plugins)
        secured = "+".join(x for x, on in (("token", token), ("tls", tls)) if on) or "none"
        _server = Server(server, service, host, bound, secured)
        _stop_at_exit_once()
    log.info("polyprof serves captures on %s (auth: %s)", _server.address, secured)
    return _server
