"""``polyprof run`` under a launcher that starts several processes (torchrun, mpirun,
srun) names its output per rank and never overwrites another rank's file (issue 28)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import polyprof
from polyprof.collect.output import launcher_rank, per_rank

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("env, rank", [
    ({}, None), ({"RANK": "3", "WORLD_SIZE": "4"}, 3), ({"RANK": "0", "WORLD_SIZE": "1"}, None),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1), ({"PMI_RANK": "5", "PMI_SIZE": "8"}, 5),
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "3"}, 2), ({"RANK": "x", "WORLD_SIZE": "4"}, None),
    ({"RANK": "4", "WORLD_SIZE": "4"}, None)])
def test_launcher_rank(env, rank):
    assert launcher_rank(env) == rank


def test_per_rank_names():
    env = {"RANK": "3", "WORLD_SIZE": "4"}
    assert per_rank(Path("out/train.polyprof"), env) == Path("out/train.rank3.polyprof")
    assert per_rank(Path("t.json.gz"), env) == Path("t.json.rank3.gz")
    assert per_rank(Path("r{rank}/t.polyprof"), env) == Path("r{rank}/t.rank3.polyprof")  # the name only
    assert per_rank(Path("t-{rank}.polyprof"), env) == Path("t-3.polyprof")
    assert per_rank(Path("t.polyprof"), {}) == Path("t.polyprof")


SCRIPT = r"""
import torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
t = torch.arange(1024, dtype=torch.float32)
for _ in range(3):
    if r == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
dist.barrier()
print("rank", r, "done", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_gloo_two_ranks_write_two_files(tmp_path):
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    script = tmp_path / "p2p.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    import socket

    with socket.socket() as sock:  # a free port on loopback for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    r = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port,
                        "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch", str(script)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.polyprof")) == ["p2p.rank0.polyprof", "p2p.rank1.polyprof"]
    for rank in (0, 1):
        t = polyprof.load(tmp_path / f"p2p.rank{rank}.polyprof")
        assert t.n_events > 0
