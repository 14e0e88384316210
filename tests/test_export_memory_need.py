"""``export``'s memory check by the format written (ranks/fits.py ``EXPORT_FACTORS``,
docs/reliability.md "Memory"): before, one factor (5.6 a byte of JSON text) for every
format, below the measured peaks of xspace, kineto and chrome.json.gz, so promise 19
("refused before it is read, never an OOM kill") could fail; ``ulimit -v`` was not
counted at all (a 146 s export, then a MemoryError blamed on writing the file)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from limits import polyprof_limited
from polyprof.ranks import fits

DATA = Path(__file__).resolve().parent / "data/traces/kineto"
NCCL = DATA / "a100_nccl_rank0.json.gz"
MIB = 1 << 20

#: peak RSS (GNU time, MiB) of ``polyprof export k1m.json -o X``: gen_kineto.py's 1M events,
#: 173,929,184 bytes of text (xspace: after its writer's stats were made smaller; 1,322
#: before); k2m (2M events, 347,866,208 bytes) (docs/reliability.md, "Memory")
K2M = 347_866_208
PEAKS = {
    "xspace": [(173_929_184, 1195), (K2M, 2527), (699_049_537, 4888)],  # (and k4m)
    "kineto": [(173_929_184, 1189), (K2M, 2368)],
    "chrome": [(173_929_184, 1120), (K2M, 2240)],
    "perfetto": [(173_929_184, 360)],
    "polyprof": [(173_929_184, 314)],
    "parquet": [(173_929_184, 424)],
}


def test_each_formats_estimate_covers_its_measured_peak() -> None:
    for fmt, points in PEAKS.items():
        for text, peak in points:
            need = fits.json_need(text, f"export:{fmt}") / MIB
            assert 1.1 * peak <= need <= 2 * peak + 150, (fmt, peak, need)
    assert fits.json_need(10 * MIB, "export") == max(fits.json_need(10 * MIB, f"export:{f}") for f in PEAKS)
    assert fits.store_need(1000, "export:xspace") > fits.store_need(1000, "export:chrome") == fits.store_need(
        1000, "export:perfetto") == fits.store_need(1000, "export")  # (a store's chrome export: measured)


def _export(out: str, env_more: dict[str, str], tmp_path: Path, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_more}
    env.pop("POLYPROF_MEMORY_CHECK", None)
    if "POLYPROF_MEMORY_AVAILABLE" not in env_more:
        env.pop("POLYPROF_MEMORY_AVAILABLE", None)

    return subprocess.run(polyprof_limited("export", str(NCCL), "-o", out, address_space=limit), env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_check_is_the_formats(tmp_path: Path) -> None:
    """190 MiB available: the Perfetto export (164 MiB estimated) goes on, the XSpace
    one (224) is refused in one line that names the format (before: both 202)."""
    r = _export("x.pftrace", {"POLYPROF_MEMORY_AVAILABLE": "190"}, tmp_path)
    assert r.returncode == 0, r.stderr
    r = _export("x.xplane.pb", {"POLYPROF_MEMORY_AVAILABLE": "190"}, tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "(polyprof export -f xspace)" in lines[0] and "190 MiB is available" in lines[0]
    assert not (tmp_path / "x.xplane.pb").exists()


def test_an_address_space_limit_is_counted(tmp_path: Path) -> None:
    """A real ``ulimit -v`` (RLIMIT_AS) of 250 MB: refused before the trace is read, in
    one line (before: not counted; the export ran into a MemoryError)."""
    r = _export("x.xplane.pb", {}, tmp_path, limit=250_000_000)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "MiB of memory to analyse" in lines[0] and "export -f xspace" in lines[0], lines


def test_a_memory_error_while_writing_says_it_is_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The XSpace writer's allocation failing (made to fail here: a real one needs a
    trace of GBs) is said as memory, naming the file, and the earlier file is kept."""
    from polyprof.cli import main
    from polyprof.writers import xspace

    out = tmp_path / "x.xplane.pb"
    out.write_bytes(b"earlier")

    def fail(*a: object, **k: object) -> bytes:
        raise MemoryError("Unable to allocate 254. MiB for an array with shape (33339988,) and data type object")

    monkeypatch.setattr(xspace, "encode_events", fail)
    assert main(["export", str(NCCL), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"polyprof: error: not enough memory to write {out}: Unable"), err
    assert out.read_bytes() == b"earlier"
