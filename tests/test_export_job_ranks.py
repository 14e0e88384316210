"""``polyprof export JOB -f kineto|tensorboard -o DIR``: a job's ranks a file each, as HTA,
TensorBoard and XProf read a job (before: one merged Kineto file with no
``distributedInfo``, which HTA and polyprof read back as one rank); ``-f xspace``, a
Kineto file name at ``-o``, and ``--critical-path`` (the job's path joins the ranks in one
trace) are refused, naming what to do instead.

The job: the 2-rank gloo DDP run in tests/data/traces/gloo (torch.profiler, CPU); the
JAX CPU job's XSpaces (tests/data/traces/jax_cpu_job) for the tensorboard export; HTA, in
a subprocess, on the Kineto directory.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import polyprof

DATA = Path(__file__).parent / "data" / "traces"
GLOO = DATA / "gloo"


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", "export", *args], capture_output=True, text=True,
                          timeout=300)


def test_kineto_export_of_a_job_is_a_file_per_rank(tmp_path: Path) -> None:
    out = tmp_path / "kineto"
    r = export(str(GLOO), "-f", "kineto", "-o", str(out))
    assert r.returncode == 0, r.stderr
    files = sorted(out.iterdir())
    assert len(files) == 2
    for rank, f in enumerate(files):  # tensorboard_trace_handler's <worker>.<ms>.pt.trace.json.gz; these
        # files name no host, so the worker is rank<N> (<host>_<pid> where the trace names both)
        assert re.fullmatch(rf"rank{rank}\.\d{{13}}\.pt\.trace\.json\.gz", f.name), f.name
    infos = sorted((orjson.loads(gzip.decompress(f.read_bytes()))["distributedInfo"] for f in files),
                   key=lambda d: d["rank"])
    assert [(d["rank"], d["world_size"]) for d in infos] == [(0, 2), (1, 2)]
    assert infos[0]["backend"] == "gloo"  # the rank's own distributedInfo, kept
    ts = polyprof.load_ranks(out)
    assert ts.ranks == [0, 1] and [e.how for e in ts.entries] == ["distributedInfo"] * 2
    # each file is its rank alone, as it was recorded
    for rank, trace in ts.traces():
        own = polyprof.load(GLOO / f"gloo_rank{rank}.json.gz")
        assert trace.n_events == own.n_events


_HTA_RANKS = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[2])
json.dump({r: int(len(ta.t.get_trace(r))) for r in sorted(ta.t.traces)}, open(sys.argv[1], "w"))
"""


@pytest.mark.skipif(importlib.util.find_spec("hta") is None, reason="Holistic Trace Analysis is not installed")
def test_hta_reads_the_exported_job_as_its_ranks(tmp_path: Path) -> None:
    out = tmp_path / "kineto"
    assert export(str(GLOO), "-f", "kineto", "-o", str(out)).returncode == 0
    res = tmp_path / "hta.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _HTA_RANKS, str(res), str(out)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(res.read_text())
    assert sorted(rows) == ["0", "1"] and all(n > 0 for n in rows.values())  # before: one rank, 0


def test_tensorboard_export_of_a_job_is_a_host_per_rank(tmp_path: Path) -> None:
    out = tmp_path / "tb"
    r = export(str(DATA / "jax_cpu_job"), "-f", "tensorboard", "-o", str(out))
    assert r.returncode == 0, r.stderr
    (run,) = (out / "plugins" / "profile").iterdir()  # one XProf run
    names = sorted(p.name for p in run.iterdir())
    assert len(names) == 2 and [n.endswith(f"_rank{i}.xplane.pb") for i, n in enumerate(names)] == [True, True]
    assert polyprof.load_ranks(run).ranks == [0, 1]


@pytest.mark.parametrize("args, says", [
    (["-f", "kineto", "-o", "job.pt.trace.json"], "-o names the directory"),
    (["-o", "job.pt.trace.json.gz"], "--rank N exports one rank"),
    (["-f", "xspace", "-o", "job.xplane.pb"], "-f tensorboard -o DIR"),
    (["-f", "kineto", "-o", "dir", "--critical-path"], "-f perfetto or -f chrome"),
])
def test_what_a_job_cannot_be_exported_as_is_refused(tmp_path: Path, args: list[str], says: str) -> None:
    args = [a if not a.startswith(("job.", "dir")) else str(tmp_path / a) for a in args]
    r = export(str(GLOO), *args)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_one_rank_and_the_merged_formats_are_as_before(tmp_path: Path) -> None:
    one = tmp_path / "r1.pt.trace.json.gz"
    assert export(str(GLOO), "--rank", "1", "-f", "kineto", "-o", str(one)).returncode == 0
    assert orjson.loads(gzip.decompress(one.read_bytes()))["distributedInfo"]["rank"] == 1
    merged = tmp_path / "job.json"
    assert export(str(GLOO), "-f", "chrome", "-o", str(merged)).returncode == 0
    assert merged.is_file()


def test_a_rank_file_is_named_after_its_host_and_process_where_the_trace_names_them() -> None:
    from polyprof.writers.kineto import rank_file_name

    t = polyprof.load(Path(__file__).parent / "data" / "h200" / "cupy_cupti_h200.polyprof")  # a polyprof run's
    src = t.sources[0]
    name = rank_file_name(t, 3)
    assert re.fullmatch(rf"{src.host}_{src.pid}\.\d{{13}}\.pt\.trace\.json\.gz", name), name


def test_a_one_rank_store_exports_as_that_rank(tmp_path: Path) -> None:
    """A store made of one trace (``convert one.json -o x.store``): every export is that
    rank's, and reads back with its device analyses (before: the merged form of a job, its
    kernels on the process "rank 0", no kernel table on read-back; -f kineto and -f xspace
    refused it without --rank 0)."""
    src = DATA / "kineto" / "a100_nccl_rank0.json.gz"
    store = tmp_path / "one.store"
    from polyprof.cli import main

    assert main(["convert", str(src), "-o", str(store), "-j", "1"]) == 0
    want = polyprof.load(src)
    for name in ("t.json.gz", "t.pftrace", "t.parquet", "t.polyprof", "t.xplane.pb", "k.pt.trace.json.gz"):
        out = tmp_path / name
        r = export(str(store), "-o", str(out), *(["-f", "kineto"] if name.startswith("k.") else []))
        assert r.returncode == 0, r.stderr
        back = polyprof.load(out)
        assert [p.kind for p in back.planes if p.kind == "device"] == [p.kind for p in want.planes
                                                                      if p.kind == "device"], name


def test_the_merged_job_says_it_is_a_viewers_and_the_kineto_files_keep_the_world_size(tmp_path: Path) -> None:
    """HTA's two sampled ranks of a 128-rank job: the Kineto files said world_size 2 (the
    ranks given), and a read of them lost the finding that ranks 2-127 were not given; the
    Chrome file of the merged job read back with its kernels on the ranks' processes and
    nothing said."""
    import shutil

    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        shutil.copy(DATA / "kineto" / f"sampled_rank{r}.json.gz", job)
    assert export(str(job), "-f", "kineto", "-o", str(tmp_path / "k")).returncode == 0
    for f in sorted((tmp_path / "k").iterdir()):
        assert json.loads(gzip.open(f).read())["distributedInfo"]["world_size"] == 128
    assert export(str(job), "-o", str(tmp_path / "m.json.gz")).returncode == 0
    back = polyprof.load(tmp_path / "m.json.gz")
    said = back.metadata["warnings"]
    assert any("ranks merged for a viewer" in str(w) and "is not the job's" in str(w) for w in said), said
    # what the warning says of a read back: each rank's process one device, no step, no launch
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path / "m.json.gz"), "-n", "0"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0 and "no steps" in r.stdout and "no host launch calls" in r.stdout, r.stdout
    devices = sorted(p.name for p in back.planes if p.kind == "device")
    assert devices == ["/device:GPU:4037", "/device:GPU:4045"]  # (named by the ranks' pids)
