"""`polyprof capture` when polyprof cannot read what a server answered: each capture is
read on its own, the others are written, and the bytes received are kept, never lost.

The servers here answer every Profile with fixed XSpace bytes (as the auditor's fake
server did): one a real XSpace (tests/data/corpus/seeds/polyprof_written.xplane.pb, 59
events), one bytes that are no XSpace. Before, the first unreadable capture raised out
of the writing: nothing was written (an empty directory, no file) and exit 1."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

import polyprof  # noqa: E402
from polyprof.capture import profiler_service_pb2 as pb  # noqa: E402
from polyprof.cli import main  # noqa: E402

GOOD = (Path(__file__).parent / "data" / "corpus" / "seeds" / "polyprof_written.xplane.pb").read_bytes()
BAD = b"\x0a\x05hello-not-an-xspace\xff\xff"
GOOD_EVENTS = 59


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def service(self, details):  # noqa: ANN001 - grpc's handler interface
        if not details.method.endswith("/Profile"):
            return None

        def profile(request: bytes, context) -> bytes:  # noqa: ANN001
            r = pb.ProfileResponse()
            tool = r.tool_data.add()
            tool.name, tool.data = "xplane.pb", self.payload
            return r.SerializeToString()

        return grpc.unary_unary_rpc_method_handler(profile, request_deserializer=None, response_serializer=None)


@pytest.fixture
def servers():
    """Two servers on loopback: (the bad one's address, the good one's)."""
    started, addresses = [], []
    for payload in (BAD, GOOD):
        s = grpc.server(futures.ThreadPoolExecutor(2))
        s.add_generic_rpc_handlers((_Handler(payload),))
        port = s.add_insecure_port("127.0.0.1:0")
        s.start()
        started.append(s)
        addresses.append(f"127.0.0.1:{port}")
    yield tuple(addresses)
    for s in started:
        s.stop(grace=None)


def _error_line(err: str, address: str) -> str:
    (line,) = [ln for ln in err.splitlines() if ln.startswith(f"polyprof: error: {address}: ")]
    return line


def test_one_unreadable_capture_does_not_lose_the_others(servers, tmp_path: Path, capsys) -> None:
    bad, good = servers
    out = tmp_path / "capset"
    assert main(["capture", f"{bad},{good}", "-d", "100", "-o", str(out), "--grace", "20"]) == 1
    err = capsys.readouterr().err
    # the good one is written and reads as the server's trace
    (written,) = [p for p in out.iterdir() if p.is_file()]
    assert written.name == f"127.0.0.1-port{good.rsplit(':', 1)[1]}-rank0.polyprof"
    assert polyprof.load(written).n_events == GOOD_EVENTS
    assert f"captured {good} -> {written} ({GOOD_EVENTS} events)" in err
    # the bad one: named, with the reason, and its bytes kept as received outside the ranks
    kept = out / "unreadable" / f"127.0.0.1-port{bad.rsplit(':', 1)[1]}.xplane.pb"
    assert kept.read_bytes() == BAD
    line = _error_line(err, bad)
    assert "polyprof cannot read this capture: not a valid XSpace protobuf" in line
    assert line.endswith(f"the XSpace as received is in {kept}")
    # the directory is still the ranks of one job: the unreadable capture is no rank of it
    assert len(polyprof.load_ranks(out)) == 1


def test_single_unreadable_capture_keeps_its_bytes(servers, tmp_path: Path, capsys) -> None:
    bad, _ = servers
    # xplane: the bytes as received are the file asked for, written whether or not they read
    raw = tmp_path / "raw.xplane.pb"
    assert main(["capture", bad, "-d", "100", "-o", str(raw), "--grace", "20"]) == 1
    assert raw.read_bytes() == BAD
    line = _error_line(capsys.readouterr().err, bad)
    assert "not a valid XSpace protobuf" in line and line.endswith(f"the XSpace as received is in {raw}")
    # polyprof: no .polyprof file (nothing to write), the bytes beside it as <out>.xplane.pb
    out = tmp_path / "c.polyprof"
    assert main(["capture", bad, "-d", "100", "-o", str(out), "--grace", "20"]) == 1
    assert not out.exists() and (tmp_path / "c.polyprof.xplane.pb").read_bytes() == BAD
    assert _error_line(capsys.readouterr().err, bad).endswith(f"is in {tmp_path / 'c.polyprof.xplane.pb'}")


def test_logdir_keeps_an_unreadable_capture_beside_the_others(servers, tmp_path: Path, capsys) -> None:
    bad, good = servers
    assert main(["capture", f"{good},{bad}", "-d", "100", "--logdir", str(tmp_path / "logs"), "--session-id", "r",
                 "--grace", "20"]) == 1
    run = tmp_path / "logs" / "plugins" / "profile" / "r"
    files = {p.name: p.read_bytes() for p in run.iterdir()}
    assert files == {f"127.0.0.1-port{good.rsplit(':', 1)[1]}-rank0.xplane.pb": GOOD,
                     f"127.0.0.1-port{bad.rsplit(':', 1)[1]}.xplane.pb": BAD}
    assert "not a valid XSpace protobuf" in _error_line(capsys.readouterr().err, bad)


def test_all_readable_is_exit_0(servers, tmp_path: Path, capsys) -> None:
    _, good = servers
    out = tmp_path / "one.polyprof"
    assert main(["capture", good, "-d", "100", "-o", str(out), "--grace", "20"]) == 0
    assert polyprof.load(out).n_events == GOOD_EVENTS and "error" not in capsys.readouterr().err
