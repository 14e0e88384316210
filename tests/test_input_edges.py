"""Inputs at the edges: files that are no regular files (a FIFO, a socket, a device), a
symbolic link loop, compressed files cut within their first bytes or padded with zeros,
and a SIGTERM while a compressed database is being inflated into TMPDIR. Each test
says what it was before."""

from __future__ import annotations

import gzip
import lzma
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import why_not_a_trace

DATA = Path(__file__).parent / "data"
NSYS = DATA / "nsys" / "saxpy_2022.sqlite"
KINETO_GZ = DATA / "traces" / "gloo" / "gloo_rank0.json.gz"
RPD = DATA / "rpd" / "matmul_result.rpd"


def _error(path: Path) -> str:
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(path)
    return str(e.value)


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    """Before: open() waited for a writer for ever (the command hung; with a writer, the
    sniff took the data and the file was called empty)."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(fifo)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and time.monotonic() - t0 < 30
    assert r.stderr.strip() == (f"polyprof: error: {fifo}: is a FIFO (named pipe), not a trace file: polyprof "
                                "reads a file's first bytes to tell its format and then reads it again, so save "
                                "the data to a file first")


@pytest.mark.parametrize("command", [["diff", "{f}", "{f}"], ["convert", "{f}", "-o", "{d}/st"]])
def test_commands_that_peek_at_ranks_refuse_a_fifo_too(tmp_path: Path, command: list[str]) -> None:
    """diff and convert look for a rank in each file first (ranks/identity.py), whose
    zip check opened the FIFO and waited for a writer for ever."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    args = [a.format(f=fifo, d=tmp_path) for a in command]
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "is a FIFO (named pipe), not a trace file" in r.stderr


def test_a_socket_and_a_device_are_refused(tmp_path: Path) -> None:
    """Before: a socket "cannot be read (No such device or address)", /dev/null "empty file"."""
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert _error(path) == f"{path}: is a socket, not a trace file: polyprof reads a file's first bytes to " \
                               "tell its format and then reads it again, so save the data to a file first"
    assert _error(Path("/dev/null")).startswith("/dev/null: is a character device, not a trace file")


def test_a_symlink_loop_and_a_dangling_link_say_so(tmp_path: Path) -> None:
    """Before: both were "no such file"."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    assert _error(tmp_path / "a") == f"{tmp_path / 'a'}: a symbolic link loop (its links lead back to themselves, " \
                                     "never to a file)"
    (tmp_path / "c.json").symlink_to("gone.json")
    assert _error(tmp_path / "c.json") == f"{tmp_path / 'c.json'}: a symbolic link to gone.json, which does not exist"
    assert _error(tmp_path / "none.json") == f"{tmp_path / 'none.json'}: no such file"


@pytest.mark.parametrize("cut", [3, 10, 20, 40])
def test_a_gzip_cut_in_its_first_bytes_is_truncated(tmp_path: Path, cut: int) -> None:
    """Before: "empty file" (its first bytes inflate to nothing)."""
    path = tmp_path / "t.json.gz"
    path.write_bytes(KINETO_GZ.read_bytes()[:cut])
    assert _error(path) == f"{path}: truncated gzip data: the compressed stream ends early"


def _xz_cuts() -> tuple[int, int]:
    """Two cuts of the xz-compressed Nsight export: one whose bytes inflate to nothing,
    and the first whose bytes inflate to something (a head no sniff knows)."""
    packed = lzma.compress(NSYS.read_bytes())
    some = next(n for n in range(13, 200) if lzma.LZMADecompressor().decompress(packed[:n]))
    return 20, some


@pytest.mark.parametrize("which", [0, 1])
def test_an_xz_database_cut_in_its_head_is_truncated(tmp_path: Path, which: int) -> None:
    """Before: "empty file (xz-compressed)", or "polyprof reads xz only of ... databases, so
    decompress it first", though polyprof reads xz-compressed Nsight exports."""
    cut = _xz_cuts()[which]
    path = tmp_path / "report.sqlite.xz"
    path.write_bytes(lzma.compress(NSYS.read_bytes())[:cut])
    assert _error(path) == f"{path}: truncated xz data: the compressed stream ends early"
    assert why_not_a_trace(path) == ""  # in a job's directory: a rank that fails saying so, not "empty"


@pytest.mark.parametrize("name, plain", [("t.json.gz", None), ("r.rpd.gz", RPD), ("n.sqlite.gz", NSYS)])
def test_zeros_after_the_last_gzip_member_are_padding(tmp_path: Path, name: str, plain: Path | None) -> None:
    """gzip -t accepts them (tape and block-device padding); before: "corrupt gzip data
    (Error -3 while decompressing data: incorrect header check)"."""
    packed = KINETO_GZ.read_bytes() if plain is None else gzip.compress(plain.read_bytes())
    expected = polyprof.load(KINETO_GZ if plain is None else plain).n_events
    path = tmp_path / name
    path.write_bytes(packed + b"\x00" * 70_000)  # past one feed of the inflater (64 KiB)
    assert polyprof.load(path).n_events == expected > 0
    path.write_bytes(packed + b"\x00" * 100 + b"junk")  # other bytes after them: still corrupt (gzip warns)
    assert "corrupt gzip data (other bytes after the zeros that pad its last member)" in _error(path)


#: ``polyprof summary`` with the compressed database's inflation into its temporary copy
#: held after its first block (so a SIGTERM reaches it while the copy exists)
_SLOW_SUMMARY = r"""
import sys, time
from polyprof.formats import sqlite_db
write = sqlite_db._write
def slow(out, block, path):
    write(out, block, path)
    if block:
        out.flush()
        time.sleep(60)
sqlite_db._write = slow
sys.argv = ["polyprof", "summary", sys.argv[1]]
from polyprof.cli import entry
entry()
"""


def test_sigterm_while_inflating_leaves_no_temporary_database(tmp_path: Path) -> None:
    """Before: SIGTERM's default action ended the process without running the `finally`
    that removes the copy: it stayed in TMPDIR (the auditor's: 143 MB; up to the inflation
    limit, 64 GiB). Now the command unwinds, then dies by the signal as before."""
    packed = tmp_path / "report.sqlite.gz"
    packed.write_bytes(gzip.compress(NSYS.read_bytes()))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SUMMARY, str(packed)], env={**os.environ,
                            "TMPDIR": str(scratch)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(p.stat().st_size > 0 for p in scratch.glob("polyprof-*.sqlite")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM, err
    assert list(scratch.iterdir()) == [] and out == "" and err == ""
