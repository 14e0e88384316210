"""The capture server and client in this process, on loopback: Terminate, a client that
goes away, the caps, one server per process, Monitor, the token rules and mutual TLS
(certificates made by the openssl command). The profiled work runs on a thread of its
own and must see no difference."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

import polyprof  # noqa: E402
from polyprof.capture import client, security, serve  # noqa: E402
from polyprof.capture import profiler_service_pb2 as pb  # noqa: E402
from polyprof.capture.protocol import stub  # noqa: E402
from polyprof.collect.session import active_session  # noqa: E402
from polyprof.errors import CaptureError, PolyprofError, ServeError  # noqa: E402


class Work:
    """Sections on a thread until stopped (at most 120 s); counts what it did."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.done = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        t_end = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < t_end:
            with polyprof.section("work"):
                sum(range(2000))
            self.done += 1
            time.sleep(0.001)

    def end(self) -> int:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        return self.done


@pytest.fixture
def server():
    s = serve(0, plugins=["host"], max_duration_ms=20_000, collect_timeout=10)
    work = Work()
    yield s
    s.stop(grace_s=2)
    assert work.end() > 0
    assert active_session() is None


def channel(s):
    return grpc.insecure_channel(s.address)


def request(ms: int, session: str = "s1") -> pb.ProfileRequest:
    return client.request_for(ms, session, "/nonexistent-repository", "h")


def test_profile_answers_with_an_xspace_of_the_sections(server) -> None:
    with channel(server) as ch:
        r = stub(ch, "Profile")(request(400), timeout=60)
    assert not r.empty_trace and [t.name for t in r.tool_data] == ["xplane.pb"]
    trace = polyprof.formats.xspace.from_bytes(r.tool_data[0].data)
    assert (trace.to_pandas()["name"] == "work").sum() > 10
    assert trace.metadata["capture"]["session_id"] == "s1"
    assert trace.metadata["capture"]["requested_ms"] == 400


def test_terminate_ends_a_capture_early(server) -> None:
    box = {}

    def call():
        with channel(server) as ch:
            t0 = time.monotonic()
            box["r"] = stub(ch, "Profile")(request(15_000, "long"), timeout=60)
            box["took"] = time.monotonic() - t0

    t = threading.Thread(target=call)
    t.start()
    with channel(server) as ch:
        # a Terminate before the capture runs ends nothing: wait until it records (a fixed
        # sleep was not always enough on a loaded machine: the capture then ran its 15 s)
        deadline = time.monotonic() + 10
        while "capturing" not in stub(ch, "Monitor")(pb.MonitorRequest(), timeout=10).data:
            assert time.monotonic() < deadline and t.is_alive(), "the capture did not start"
            time.sleep(0.05)
        stub(ch, "Terminate")(pb.TerminateRequest(session_id="other"), timeout=10)  # not this one
        time.sleep(0.3)
        assert t.is_alive()
        stub(ch, "Terminate")(pb.TerminateRequest(session_id="long"), timeout=10)
    t.join(30)
    # not terminated, the answer comes once 15 s have passed from when recording began,
    # which was after the call was made: under 15 s from the call, it ended early
    assert not t.is_alive() and box["took"] < 15, box.get("took")
    assert box["r"].tool_data and not box["r"].empty_trace


def test_a_client_going_away_frees_the_server(server) -> None:
    with channel(server) as ch:
        with pytest.raises(grpc.RpcError) as e:
            stub(ch, "Profile")(request(15_000), timeout=0.5)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        deadline = time.monotonic() + 20
        while "idle" not in stub(ch, "Monitor")(pb.MonitorRequest(), timeout=10).data:
            assert time.monotonic() < deadline, "the abandoned capture kept running"
            time.sleep(0.1)
        r = stub(ch, "Profile")(request(200, "after"), timeout=60)
    assert r.tool_data


def test_busy_while_a_capture_runs(server) -> None:
    t = threading.Thread(target=lambda: client.capture([server.address], 3000))
    t.start()
    try:
        deadline = time.monotonic() + 20
        with channel(server) as ch:
            while "capturing" not in stub(ch, "Monitor")(pb.MonitorRequest(), timeout=10).data:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        second = client.capture([server.address], 200)[0]
        assert not second.ok and second.error.startswith("ALREADY_EXISTS: polyprof: busy")
    finally:
        t.join(60)


def test_duration_cap(server) -> None:
    c = client.capture([server.address], 25_000)[0]
    assert not c.ok and c.error == ("INVALID_ARGUMENT: polyprof: duration_ms 25000 is over this "
                                    "server's cap of 20000 ms")


@pytest.mark.parametrize("session_id", ["x" * 1_000_000, "run\n1\x1b[2J"])
def test_a_session_id_that_cannot_be_logged_is_refused(server, session_id: str, caplog) -> None:
    """A client's session id is logged (-v) into the profiled program's stderr and kept
    in the trace: a megabyte of it, or terminal control characters, was written as sent."""
    import grpc

    with caplog.at_level("INFO", logger="polyprof"):
        with pytest.raises(grpc.RpcError) as e:
            stub(channel(server), "Profile")(pb.ProfileRequest(session_id=session_id, duration_ms=100), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "session_id: at most 256" in e.value.details()
    assert session_id not in caplog.text


def test_response_size_cap() -> None:
    s = serve(0, plugins=["host"], max_response_bytes=2000)
    work = Work()
    try:
        c = client.capture([s.address], 500)[0]
    finally:
        s.stop(grace_s=2)
        work.end()
    assert not c.ok and c.error.startswith("RESOURCE_EXHAUSTED: polyprof: the trace is")
    assert "over this server's cap" in c.error


def test_one_server_per_process(server) -> None:
    with pytest.raises(ServeError, match="already serves captures on 127.0.0.1"):
        serve(0)


def test_port_in_use_is_a_clear_error(server) -> None:
    server_port = server.port
    server.stop(grace_s=1)
    with __import__("socket").socket() as sock:
        sock.bind(("127.0.0.1", server_port))
        sock.listen()
        with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{server_port}"):
            serve(server_port)


def test_monitor_says_who_and_what(server) -> None:
    import os

    with channel(server) as ch:
        text = stub(ch, "Monitor")(pb.MonitorRequest(duration_ms=100), timeout=10).data
    assert text.startswith(f"polyprof server in pid {os.getpid()} on ") and ": idle; 0 captures" in text


def test_no_server_is_a_one_line_error() -> None:
    from capture_helpers import free_port

    c = client.capture([f"127.0.0.1:{free_port()}"], 100, grace_s=5)[0]
    assert not c.ok and c.error.startswith("no profiler server answers at 127.0.0.1:")
    with pytest.raises(CaptureError, match="no address"):
        client.capture([" "], 100)
    with pytest.raises(CaptureError, match="not HOST:PORT"):
        client.capture(["localhost:http"], 100)


# ------------------------------------------------------------------------ the rules
@pytest.mark.parametrize("host,ok", [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True),
                                     ("localhost", True), ("0.0.0.0", False), ("::", False),
                                     ("10.1.2.3", False), ("myhost.example", False)])
def test_only_loopback_is_open_without_a_token(host: str, ok: bool) -> None:
    if ok:
        security.check_exposure(host, None, None)
    else:
        with pytest.raises(ServeError, match=f"refusing to serve captures on {host}"):
            security.check_exposure(host, None, None)
        security.check_exposure(host, "a-token-of-sixteen-chars", None)  # a token lets it start
        security.check_exposure(host, None, security.TLSFiles("c", "k", ca="client-ca"))
        with pytest.raises(ServeError, match="only encrypts"):
            security.check_exposure(host, None, security.TLSFiles("c", "k"))


def test_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(security.TOKEN_ENV, raising=False)
    monkeypatch.delenv(security.TOKEN_FILE_ENV, raising=False)
    assert security.read_token() is None
    monkeypatch.setenv(security.TOKEN_ENV, "short")
    with pytest.raises(ServeError, match="shorter than 16"):
        security.read_token()
    f = tmp_path / "tok"
    f.write_text("  file-token-0123456789abcdef\n")
    monkeypatch.setenv(security.TOKEN_FILE_ENV, str(f))
    assert security.read_token() == "file-token-0123456789abcdef"  # the file wins
    monkeypatch.setenv(security.TOKEN_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(ServeError, match="missing: cannot read it"):
        security.read_token()


def test_no_token_option_on_the_command_line() -> None:
    from polyprof.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["capture", "127.0.0.1:1", "--token", "secret-on-the-command-line"])


@pytest.mark.parametrize("text,expected", [("127.0.0.1:9012", ("127.0.0.1", 9012)), ("9012", ("127.0.0.1", 9012)),
                                           ("[::1]:80", ("::1", 80)), ("h:0", ("h", 0))])
def test_addresses(text: str, expected: tuple) -> None:
    assert security.split_address(text) == expected
    assert security.split_address(security.join_address(*expected)) == expected


@pytest.mark.parametrize("bad", ["h:x", "h:70000", "h:-1", ""])
def test_bad_addresses(bad: str) -> None:
    with pytest.raises(PolyprofError):
        security.split_address(bad)


# ------------------------------------------------------------------------ TLS
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", f"{who}.key",
                 "-out", f"{who}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "san.cnf", "-out", f"{who}.pem", cwd=d)
    return d


def test_mutual_tls(pki: Path) -> None:
    tls = security.TLSFiles(cert=str(pki / "server.pem"), key=str(pki / "server.key"), ca=str(pki / "ca.pem"))
    s = serve(0, plugins=["host"], tls=tls)
    work = Work()
    try:
        assert s.secured == "tls"
        good = security.TLSFiles(cert=str(pki / "client.pem"), key=str(pki / "client.key"), ca=str(pki / "ca.pem"))
        ok = client.capture([s.address], 300, tls=good, grace_s=30)[0]
        assert ok.ok, ok.error
        assert (ok.trace().to_pandas()["name"] == "work").sum() > 0
        no_cert = client.capture([s.address], 300, tls=security.TLSFiles(ca=str(pki / "ca.pem")), grace_s=2)[0]
        assert not no_cert.ok
        plain = client.capture([s.address], 300, grace_s=2)[0]
        assert not plain.ok
    finally:
        s.stop(grace_s=2)
        work.end()


def test_capture_command_logdir_and_xplane_set(server, tmp_path: Path, capsys) -> None:
    from polyprof.cli import main

    assert main(["capture", server.address, "-d", "300", "--logdir", str(tmp_path / "logs"),
                 "--session-id", "run 1"]) == 0
    files = list((tmp_path / "logs" / "plugins" / "profile" / "run_1").glob("*.xplane.pb"))
    assert len(files) == 1 and files[0].name.endswith(f"-{__import__('os').getpid()}-rank0.xplane.pb")
    assert (polyprof.load(files[0]).to_pandas()["name"] == "work").sum() > 0
    assert f"captured {server.address} -> {files[0]}" in capsys.readouterr().err

    # two addresses, the second one dead: the first is written, the second reported, exit 1
    from capture_helpers import free_port

    dead = f"127.0.0.1:{free_port()}"
    out = tmp_path / "set"
    assert main(["capture", f"{server.address},{dead}", "-d", "300", "-o", str(out), "--format", "xplane",
                 "--grace", "20"]) == 1
    err = capsys.readouterr().err
    assert f"polyprof: error: {dead}: no profiler server answers at {dead}" in err
    (only,) = list(out.iterdir())
    assert only.name.endswith("-rank0.xplane.pb")  # ranks follow the address order
    assert (polyprof.load(only).to_pandas()["name"] == "work").sum() > 0
    # -o naming a file for several addresses: refused before capturing ("File exists" after)
    t0 = time.monotonic()
    assert main(["capture", f"{server.address},{dead}", "-d", "5000", "-o", str(only)]) == 1
    assert f"{only}: exists and is not a directory" in capsys.readouterr().err and time.monotonic() - t0 < 4


@pytest.mark.parametrize("method", ["Profile", "Terminate", "Monitor"])
def test_a_malformed_request_is_refused_without_a_traceback(server, method: str, capfd, caplog) -> None:
    # bytes that are no protobuf message (a truncated varint field): before, gRPC logged
    # "Exception deserializing request!" with a traceback into the program's stderr
    raw = channel(server).unary_unary(f"/tensorflow.ProfilerService/{method}", request_serializer=None,
                                      response_deserializer=None)
    with caplog.at_level("INFO", logger="polyprof"):
        with pytest.raises(grpc.RpcError) as e:
            raw(b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in e.value.details()
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "Exception deserializing" not in err and not out
    assert any(f"malformed {method} request" in r.getMessage() for r in caplog.records)
    assert stub(channel(server), "Monitor")(pb.MonitorRequest(), timeout=10)  # still serving
