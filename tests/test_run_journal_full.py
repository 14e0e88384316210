"""``polyprof run`` where the disk is full for the trace and its crash journal alike
(RLIMIT_FSIZE of 100 kB): the program's exit code kept, and the last line no longer
points at the journal as holding "the host data recorded so far" when it stopped before
it wrote any (it then held 0 events)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from limits import polyprof_limited

SRC = Path(__file__).resolve().parents[1] / "src"


def test_an_empty_journal_is_said_to_hold_nothing(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text("import polyprof, sys\nfor i in range(30000):\n"
                                     "    with polyprof.section('s%d' % (i % 500), i=i):\n        pass\nsys.exit(5)\n")
    r = subprocess.run(polyprof_limited("run", "--no-summary", "--plugins", "host", "-o", "big.polyprof", "big.py",
                                        file_size=100_000),
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(SRC), "TMPDIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 5, r.stderr
    assert "crash journal" in r.stderr and "stopped" in r.stderr, r.stderr
    assert "big.polyprof.partial holds no event either" in r.stderr, r.stderr
    assert "the host data recorded so far" not in r.stderr, r.stderr
