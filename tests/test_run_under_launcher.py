"""``polyprof run`` under a launcher (torchrun, MPI, SLURM set RANK / WORLD_SIZE and the
like): rank 0 prints its summary and says it is rank 0's alone; the other ranks print
none, each one line on how to see the job's (before: every rank a full summary, none
naming its rank, interleaved on one terminal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "work.py").write_text("import polyprof\nwith polyprof.section('step'):\n    sum(range(1000))\n")
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                                              "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                                              "SLURM_PROCID", "SLURM_NTASKS")}
    full.update(env, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "host", "work.py"], cwd=tmp_path,
                          env=full, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("rank", [0, 1])
def test_one_summary_per_job_and_a_line_per_rank(tmp_path: Path, rank: int) -> None:
    r = _run(tmp_path, {"RANK": str(rank), "WORLD_SIZE": "2"})
    assert r.returncode == 0, r.stderr
    assert ("polyprof summary:" in r.stdout) == (rank == 0), r.stdout
    said = "the summary above is rank 0's alone" if rank == 0 else "rank 1's summary is left out"
    assert f"polyprof: rank {rank} of 2: {said}; the job's, every rank side by side: polyprof summary ." in r.stderr


def test_a_one_rank_launch_and_no_launcher_print_the_summary_alone(tmp_path: Path) -> None:
    for env in ({"RANK": "0", "WORLD_SIZE": "1"}, {}):
        r = _run(tmp_path, env)
        assert "polyprof summary:" in r.stdout and "of 1:" not in r.stderr and "side by side" not in r.stderr
