"""``polyprof run`` under a launcher that starts several processes (torchrun, mpirun,
srun) names its output per rank and never overwrites another rank's file (issue 28)."""

from __future__ import annotations

import os
import shutil
import sys
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
    assert per_rank(Path("t.json.gz"), env) == Path("t.rank3.json.gz")  # (its ending kept: its format)
    assert per_rank(Path("r{rank}/t.polyprof"), env) == Path("r{rank}/t.rank3.polyprof")  # the name only
    assert per_rank(Path("t-{rank}.polyprof"), env) == Path("t-3.polyprof")
    assert per_rank(Path("t.polyprof"), {}) == Path("t.polyprof")


PIPELINE = r"""
import torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
torch.manual_seed(r)
layer = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(layer.parameters(), lr=0.01)
act = torch.empty(32, 64)  # the known tensor: 32 x 64 float32 = 8192 bytes
for step in range(10):
    opt.zero_grad()
    if r == 0:  # stage 0: activations forward to rank 1, their gradient back
        y = layer(torch.randn(32, 64))
        dist.send(y.detach(), 1)
        grad = torch.empty(32, 64)
        dist.recv(grad, 1)
        y.backward(grad)
    else:
        dist.recv(act, 0)
        a = act.clone().requires_grad_()
        layer(a).square().mean().backward()
        dist.send(a.grad, 0)
    opt.step()
dist.destroy_process_group()
"""


def _torchrun(tmp_path: Path, name: str, script: str) -> None:
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    (tmp_path / name).write_text(script)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    import socket

    with socket.socket() as sock:  # a free port on loopback for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    r = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port,
                        "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch", name],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_torchrun_gloo_pipeline_shows_transfers(tmp_path):
    """Must-show 5 of issue 28: a model-parallel torch program on gloo, two ranks on
    127.0.0.1, under polyprof run: one file per rank (never one overwriting the other), the transfers with the tensor's
    bytes per step, no collective and no straggler made of them, the ranks aligned from
    the transfers (both on this host's clock: the true offset is 0, within the bound)."""
    pytest.importorskip("torch")
    import json

    _torchrun(tmp_path, "pipe.py", PIPELINE)
    files = sorted(tmp_path.glob("*.polyprof"))
    assert [p.name for p in files] == ["pipe.rank0.polyprof", "pipe.rank1.polyprof"]
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, files), "--json"],
                       env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    tables = {k: v["records"] for k, v in json.loads(r.stdout)["tables"].items()}
    tr = {(row["src"], row["dst"]): row for row in tables["transfers"]}
    assert set(tr) == {(0, 1), (1, 0)}
    for row in tr.values():
        assert row["bytes"] == 32 * 64 * 4 and row["bytes_per_step"] == 32 * 64 * 4
        assert row["count"] == row["sends"] == row["recvs"] == 9  # steps 1-9: the warm-up step left out
        assert row["blocking_ns"] > 0
    assert tables["collective_stats"] == [] and tables["straggler_collectives"] == []
    assert all(s["collectives"] == 0 and s["last_count"] == 0 for s in tables["stragglers"])
    al = {a["rank"]: a for a in tables["rank_alignment"]}
    assert al[1]["method"] == "transfers" and al[1]["aligned"] and al[1]["collectives"] == 20
    assert abs(al[1]["offset_ns"]) <= al[1]["bound_ns"] < 5e6  # one host, one clock: truly 0
    for row in tables["rank_overview"]:
        assert row["transfers"] == 18 and row["communication_ns"] > 0 and row["communication_pct"] > 0
    from io import StringIO

    from rich.console import Console

    from polyprof.report.ranks_terminal import render_ranks
    from polyprof.report.tables import build

    out = StringIO()
    render_ranks(polyprof.load_ranks([str(f) for f in files]).analyze(executor="serial"), console=Console(
        file=out, width=120))
    text = out.getvalue()
    assert "from transfers (bound at most" in text and "Transfers (point-to-point)" in text
    assert "Stragglers" not in text and "Collectives" not in text
    one = build(polyprof.load(files[1]), "auto").tables["transfers"]  # one rank's own view
    assert sorted(zip(*(one[c].tolist() for c in ("src", "dst", "op", "bytes", "count")))) == [
        (0, 1, "recv", 8192, 9), (1, 0, "send", 8192, 9)]
    # the Kineto export says each file's rank (distributedInfo), so HTA reads the job's two
    # ranks: without it HTA took every file for rank 0 ("default to rank = 0") and kept one
    job = tmp_path / "kineto"
    job.mkdir()
    for f in files:
        r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(f), "-f", "kineto", "-o",
                            str(job / (f.stem + ".json"))], env={**os.environ, "PYTHONPATH": str(SRC)},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
    infos = [json.loads(p.read_text())["distributedInfo"] for p in sorted(job.glob("*.json"))]
    assert [(i["rank"], i["world_size"], i["backend"]) for i in infos] == [(0, 2, "gloo"), (1, 2, "gloo")]
    assert all([c["ranks"] for c in i["pg_config"]] == [[0, 1]] for i in infos), infos  # the groups, as torch's
    hta = pytest.importorskip("hta.trace_analysis")
    assert sorted(hta.TraceAnalysis(trace_dir=str(job)).t.traces) == [0, 1]


def test_profiling_the_launcher_says_how_to_profile_the_ranks(tmp_path):
    """``polyprof run -m torch.distributed.run ... train.py`` records the launcher, and
    none of the ranks it starts in child processes: it said nothing and wrote a trace of
    0 events. It now says so, and how to run polyprof under the launcher instead."""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(tmp_path / "l.polyprof"),
                        "-m", "torch.distributed.run", "--help"], env={**os.environ, "PYTHONPATH": str(SRC)},
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "polyprof: note: torch.distributed.run starts each rank in a child process" in r.stderr
    assert "torchrun ... -m polyprof run SCRIPT" in r.stderr
