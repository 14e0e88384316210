"""Perfetto's own text-proto test traces (tests/data/perfetto, Apache-2.0) as the binary
files a producer writes; for the Perfetto reader's tests."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "perfetto"


def pftrace(name: str, tmp_path: Path) -> Path:
    """``DATA/<name>.textproto`` parsed with Perfetto's protos, written as ``<name>.pftrace``."""
    from google.protobuf import text_format
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P

    msg = P.Trace()
    text_format.Parse((DATA / f"{name}.textproto").read_text(), msg)
    out = tmp_path / f"{name}.pftrace"
    out.write_bytes(msg.SerializeToString())
    return out


def write_packets(tmp_path: Path, packets: list, name: str = "t.pftrace") -> Path:
    """``packets`` (Perfetto's TracePacket messages) as one trace file."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P

    msg = P.Trace()
    msg.packet.extend(packets)
    out = tmp_path / name
    out.write_bytes(msg.SerializeToString())
    return out
