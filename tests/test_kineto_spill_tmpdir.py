"""`polyprof convert` of Kineto JSON spills its flow endpoints to a temporary file in
TMPDIR (formats/kineto/chunks.py): a full TMPDIR or a file size limit is said as the
temporary directory's, not as the input's fault in a raw ``OSError``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from limits import polyprof_limited

BIG = Path(__file__).resolve().parent / "data" / "h200" / "torch_transformer_h200.json.gz"  # 6,780 flows


def _convert(out: Path, tmpdir: Path | None = None, fsize: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.run(polyprof_limited("convert", str(BIG), "-o", str(out), file_size=fsize), env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_full_tmpdir_is_said_as_such(tmp_path, mount_tmpfs):
    tmp = mount_tmpfs("32k")
    r = _convert(tmp_path / "st", tmpdir=tmp)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"cannot spill the flow endpoints into a temporary file in {tmp} (No space left on device; TMPDIR " \
           "names another directory)" in r.stderr, r.stderr
    assert "OSError" not in r.stderr and not (tmp_path / "st").exists()
    assert list(tmp.iterdir()) == []  # (the spill file is anonymous: nothing left there)


def test_a_file_size_limit_is_said_as_the_temporary_files(tmp_path):
    """``ulimit -f 100``: the spill is the first file past it."""
    r = _convert(tmp_path / "st", tmpdir=tmp_path, fsize=100 * 1024)
    assert r.returncode == 1 and f"into a temporary file in {tmp_path} (File too large" in r.stderr, r.stderr
    assert "OSError" not in r.stderr
