"""Commands under an ASCII locale (``LC_ALL=POSIX`` without ``PYTHONUTF8``: Python's
streams are ASCII): the tables' box lines, ``µ`` and ``…`` written as ASCII look-alikes,
where the summary used to end in an internal error (UnicodeEncodeError)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from polyprof.report.encoding import encodable

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"


def _ascii_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE")}
    env.update(LC_ALL="POSIX", PYTHONUTF8="0", COLUMNS="80")
    return env


def _polyprof(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, env=_ascii_env(),
                          timeout=120, cwd=cwd)


def test_summary_in_an_ascii_locale_draws_its_tables_in_ascii():
    out = _polyprof("summary", str(KINETO / "a100_alexnet_small.json.gz"))
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert out.stdout.isascii() and out.stderr.isascii()
    text = out.stdout.decode()
    assert "+- Findings" in text and "| stream" in text and "* high" in text
    assert "?" not in text  # every character it writes has its look-alike


def test_run_in_an_ascii_locale_leaves_the_program_its_own_errors(tmp_path):
    """The program's print of a non-ASCII text fails as under python (its stream is not
    touched); polyprof's summary after it is written in ASCII."""
    script = tmp_path / "uni.py"
    script.write_text('print("before")\nprint("caf\\u00e9")\n')
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, env=_ascii_env(), timeout=60)
    out = _polyprof("run", "-o", str(tmp_path / "t.polyprof"), str(script), cwd=tmp_path)
    assert plain.returncode == out.returncode == 1
    assert b"UnicodeEncodeError" in plain.stderr and b"UnicodeEncodeError" in out.stderr
    assert out.stdout.startswith(b"before\n") and out.stdout.isascii()
    assert b"+---" in out.stdout and b"trace written to" in out.stderr


def test_encodable_leaves_unicode_streams_and_puts_the_handler_back():
    raw = io.BytesIO()
    ascii_stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict")
    utf8_stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    with encodable(ascii_stream, utf8_stream):
        ascii_stream.write("│ 1.5 µs … ╇━┩ ×2 — ≤ ✓\n")
        assert utf8_stream.errors == "strict"
    ascii_stream.flush()
    assert raw.getvalue() == b"| 1.5 us ... +-+ x2 - <= ?\n"
    assert ascii_stream.errors == "strict"
