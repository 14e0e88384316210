"""``polyprof critical-path`` runs the memory pre-check before it reads its traces, as
``summary`` does (cli/memory_check.py): where they would not fit it says so in one line
naming them, exit 1, instead of being killed part way without a word. It holds every
rank in one process, so a job's ranks are summed, each estimated as the summary's (its
measured peak on a Kineto trace is the summary's, docs/reliability.md). Before, it read
the trace whatever the memory. Real ranks: the A100 NCCL Kineto traces under
tests/data/traces/kineto (a job of it twice, as tests/test_memory_fits.py makes one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polyprof.cli.memory_check import check_memory
from polyprof.ranks import fits

KINETO = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
RANK0 = KINETO / "a100_nccl_rank0.json.gz"


def _run(args: list[str], cwd: Path, check: str | None) -> subprocess.CompletedProcess:
    """``polyprof critical-path ARGS`` with 1 MiB available (POLYPROF_MEMORY_AVAILABLE)."""
    env = {**os.environ, "POLYPROF_MEMORY_AVAILABLE": "1"}
    env.pop("POLYPROF_MEMORY_CHECK", None)
    if check is not None:
        env["POLYPROF_MEMORY_CHECK"] = check
    return subprocess.run([sys.executable, "-m", "polyprof", "critical-path", *args], env=env, capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_a_trace_that_would_not_fit_is_refused_in_one_line(tmp_path: Path) -> None:
    r = _run([str(RANK0)], tmp_path, None)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert f"{RANK0} (polyprof critical-path)" in lines[0] and "MiB is available" in lines[0]
    assert "POLYPROF_MEMORY_CHECK=0" in lines[0] and not r.stdout
    r = _run([str(RANK0)], tmp_path, "0")  # the check off: it goes on
    assert r.returncode == 0 and "critical path" in r.stdout, r.stderr


def test_a_jobs_ranks_are_summed(tmp_path: Path) -> None:
    """A directory of two ranks, all held at once: their needs summed over one base."""
    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(RANK0, d / f"rank{r}.json.gz")
    r = _run([str(d)], tmp_path, None)
    lines = [x for x in r.stderr.strip().splitlines() if "WARNING" not in x]  # the copies name the same rank
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "(2 ranks, polyprof critical-path: every rank held at once)" in lines[0]
    one = fits.shape_need(fits.json_shape(RANK0), "summary") - fits.BASE_BYTES
    assert f"needs about {(fits.BASE_BYTES + 2 * one) / 2**20:,.0f} MiB" in lines[0]


def test_the_estimate_is_the_summarys(monkeypatch: pytest.MonkeyPatch) -> None:
    """One trace: the summary's estimate of it, said for critical-path."""
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", "1")
    monkeypatch.delenv("POLYPROF_MEMORY_CHECK", raising=False)
    with pytest.raises(fits.NotEnoughMemoryError) as got:
        check_memory("critical-path", [str(RANK0)])
    with pytest.raises(fits.NotEnoughMemoryError) as summary:
        check_memory("summary", [str(RANK0)])
    need = str(summary.value).split("needs about ")[1].split(" of memory")[0]
    assert f"needs about {need} of memory" in str(got.value)
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str(64 << 10))  # 64 GiB: let through
    check_memory("critical-path", [str(RANK0)])
