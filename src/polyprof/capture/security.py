"""Who may capture: the address rules, the shared token and TLS, for both sides.

The server binds to loopback unless told otherwise. Any other address needs a shared
token (sent as gRPC metadata ``authorization: Bearer <token>``) or TLS with client
certificates; without one it refuses to start. The token comes from the environment
(``POLYPROF_SERVE_TOKEN``) or a file (``POLYPROF_SERVE_TOKEN_FILE``), never from a command
line, where other users of the machine could read it. When a token is configured it is
required on loopback too.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import ServeError
from .protocol import TOKEN_METADATA_KEY

if TYPE_CHECKING:
    import grpc

TOKEN_ENV = "POLYPROF_SERVE_TOKEN"
TOKEN_FILE_ENV = "POLYPROF_SERVE_TOKEN_FILE"
TLS_CERT_ENV = "POLYPROF_SERVE_TLS_CERT"
TLS_KEY_ENV = "POLYPROF_SERVE_TLS_KEY"
TLS_CLIENT_CA_ENV = "POLYPROF_SERVE_TLS_CLIENT_CA"
MIN_TOKEN_CHARS = 16


def split_address(address: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``PORT`` -> (host, port); ServeError if malformed."""
    text = address.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = default_host, text
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        raise ServeError(f"{address!r}: not HOST:PORT (the port must be a number)") from None
    if not 0 <= number <= 65535:
        raise ServeError(f"{address!r}: port {number} is out of range 0-65535")
    return host, number


def join_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve to anything


def read_token(token_file: str | Path | None = None) -> str | None:
    """The shared token: from ``token_file``, else ``$POLYPROF_SERVE_TOKEN_FILE``, else
    ``$POLYPROF_SERVE_TOKEN``; None if none is set. Surrounding whitespace is dropped."""
    file = token_file or os.environ.get(TOKEN_FILE_ENV)
    if file:
        try:
            token = Path(file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ServeError(f"token file {file}: cannot read it ({e})") from None
        where = f"token file {file}"
    else:
        token = (os.environ.get(TOKEN_ENV) or "").strip()
        if not token:
            return None
        where = f"${TOKEN_ENV}"
    if len(token) < MIN_TOKEN_CHARS:
        raise ServeError(f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters; "
                         "use a random one, e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`")
    return token


@dataclass(frozen=True)
class TLSFiles:
    """PEM files. Server: cert + key (+ client_ca to require client certificates).
    Client: ca (to verify the server) and, for mutual TLS, cert + key."""

    cert: str | None = None
    key: str | None = None
    ca: str | None = None

    def _read(self, which: str) -> bytes | None:
        path = getattr(self, which)
        if not path:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise ServeError(f"TLS {which} file {path}: cannot read it ({e})") from None

    def server_credentials(self) -> grpc.ServerCredentials:
        import grpc

        if not (self.cert and self.key):
            raise ServeError("TLS needs both a certificate and a key file")
        ca, key, cert = self._read("ca"), self._read("key"), self._read("cert")
        assert key is not None and cert is not None  # both paths are set (checked above)
        return grpc.ssl_server_credentials([(key, cert)],
                                           root_certificates=ca, require_client_auth=ca is not None)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc

        return grpc.ssl_channel_credentials(root_certificates=self._read("ca"),
                                            private_key=self._read("key"),
                                            certificate_chain=self._read("cert"))


def tls_from_env() -> TLSFiles | None:
    cert, key = os.environ.get(TLS_CERT_ENV), os.environ.get(TLS_KEY_ENV)
    if not (cert or key):
        return None
    return TLSFiles(cert=cert, key=key, ca=os.environ.get(TLS_CLIENT_CA_ENV))


def check_exposure(host: str, token: str | None, tls: TLSFiles | None) -> None:
    """Refuse to listen beyond loopback without a token or mutual TLS, saying why."""
    if is_loopback(host) or token or (tls and tls.ca):
        return
    what = "TLS without client certificates only encrypts; " if tls else ""
    raise ServeError(
        f"refusing to serve captures on {host}: that address is reachable from other machines "
        f"and anyone who reaches it could profile this process. {what}Set a shared token "
        f"(${TOKEN_ENV} or ${TOKEN_FILE_ENV}) or TLS with client certificates "
        f"(${TLS_CERT_ENV}, ${TLS_KEY_ENV}, ${TLS_CLIENT_CA_ENV}), or serve on 127.0.0.1")


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return ((TOKEN_METADATA_KEY, f"Bearer {token}"),) if token else ()


def token_interceptor(token: str) -> grpc.ServerInterceptor:
    """A server interceptor that answers UNAUTHENTICATED to calls without ``token``."""
    import grpc

    expected = f"Bearer {token}".encode()

    def deny(request: object, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED,
                      "polyprof: this server needs the shared token (authorization metadata); "
                      f"set ${TOKEN_ENV} or ${TOKEN_FILE_ENV} for the client")

    denied: grpc.RpcMethodHandler[object, None] = grpc.unary_unary_rpc_method_handler(deny)

    class _TokenCheck(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                              details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            for key, value in details.invocation_metadata or ():
                if key == TOKEN_METADATA_KEY:
                    got = value.encode() if isinstance(value, str) else bytes(value)
                    if hmac.compare_digest(got, expected):
                        return continuation(details)
            return denied

    return _TokenCheck()
