"""Capture on demand: a ProfilerService-compatible server in the profiled process, and
a client that captures polyprof, TensorFlow and JAX processes. Needs ``polyprof[serve]``
(grpcio). See docs/capture.md for the protocol and the security model.

    server = polyprof.serve(port=9012)          # in the program: idle until a capture
    $ polyprof capture 127.0.0.1:9012 --duration-ms 2000 -o c.polyprof
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .. import logs
from .._lazy import lazy_names
from ..errors import ServeError
from .security import TLSFiles, read_token, split_address, tls_from_env
from .server import Limits, Server, current

if TYPE_CHECKING:
    from ..collect.plugin import Plugin

log = logs.kept("polyprof.serve")

SERVE_ENV = "POLYPROF_SERVE"
#: set by a process that serves on a fixed port, so its children, which inherit
#: POLYPROF_SERVE, do not all try (and fail) to serve on the same port
OWNER_ENV = "POLYPROF_SERVE_OWNER"


def serve(port: int = 0, host: str = "127.0.0.1", *, plugins: Sequence[str | Plugin] | None = None,
          token: str | None = None, token_file: str | Path | None = None, tls: TLSFiles | None = None,
          max_duration_ms: int = Limits.max_duration_ms, max_response_bytes: int = Limits.max_response_bytes,
          collect_timeout: float = 30.0, exit_grace_s: float = Limits.exit_grace_s) -> Server:
    """Serve captures from this process on ``host:port`` (port 0: any free port, see
    ``Server.port``) until ``Server.stop()`` or the end of the program. A capture in
    progress when the program ends is answered with what it recorded; the program's
    exit waits at most ``exit_grace_s`` for that answer.

    Listening on an address other than loopback needs a shared token (``token``, or
    ``token_file``, or ``$POLYPROF_SERVE_TOKEN[_FILE]``) or TLS with client certificates
    (``tls``, or ``$POLYPROF_SERVE_TLS_CERT``/``_KEY``/``_CLIENT_CA``); otherwise this
    raises :class:`polyprof.errors.ServeError` saying why. ``plugins`` as for
    :func:`polyprof.profile` (None: every available default plugin).
    """
    _need_grpc()
    if token is None:
        token = read_token(token_file)
    if tls is None:
        tls = tls_from_env()
    limits = Limits(max_duration_ms=int(max_duration_ms), max_response_bytes=int(max_response_bytes),
                    exit_grace_s=max(0.0, float(exit_grace_s)))
    from .server import start

    return start(host, int(port), plugins=plugins, token=token, tls=tls, limits=limits,
                 collect_timeout=collect_timeout)


def serve_address(address: str, *, plugins: Sequence[str | Plugin] | None = None,
                  collect_timeout: float = 30.0) -> Server:
    """:func:`serve` on ``HOST:PORT`` (or ``PORT`` for loopback); the server already
    running in this process if it listens there."""
    host, port = split_address(address)
    running = current()
    if running is not None and running.host == host and port in (0, running.port):
        return running
    server = serve(port, host, plugins=plugins, collect_timeout=collect_timeout)
    if port:
        os.environ[OWNER_ENV] = str(os.getpid())
    return server


def _is_polyprof_cli() -> bool:
    # `polyprof ...` (entry point) or `python -m polyprof` (argv[0] is "-m" while the
    # package is imported): the CLI decides itself (`polyprof run` serves, others do not)
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0 == "-m" or Path(argv0).name == "polyprof"


def serve_from_env() -> Server | None:
    """Serve on ``$POLYPROF_SERVE`` (``HOST:PORT``) when it is set; run when polyprof is
    imported. Never raises: a server that cannot start is logged and the program runs on."""
    address = os.environ.get(SERVE_ENV, "").strip()
    if not address or _is_polyprof_cli():
        return None
    owner = os.environ.get(OWNER_ENV, "")
    try:
        if owner and owner != str(os.getpid()) and split_address(address)[1] != 0:
            log.info("%s=%s is served by process %s, whose environment this process inherited; "
                     "not serving here (use port 0 to serve from every process)", SERVE_ENV, address, owner)
            return None
        return serve_address(address)
    except Exception as e:  # noqa: BLE001 - the program must run on without a server
        log.error("%s=%s: not serving captures: %s", SERVE_ENV, address, e)
        return None


def _need_grpc() -> None:
    from .server import quiet_grpc

    try:
        with quiet_grpc():
            import grpc  # noqa: F401
    except ImportError:
        raise ServeError("capture needs grpcio: pip install 'polyprof[serve]'") from None


__all__ = ["serve", "serve_address", "serve_from_env", "Server", "Limits", "TLSFiles", "current"]

__getattr__ = lazy_names(__name__, {})  # its submodules as attributes, on first use (_lazy.submodule)
