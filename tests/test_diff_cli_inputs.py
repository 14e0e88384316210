"""``polyprof diff`` as the command line reads its inputs and shows its tables: the device
table of one XLA module keeps its number columns (its names shown without the module,
which its title says once), and a side whose runs are the rank files of one job is
refused with how to give a job, not read as replicates of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from polyprof.cli import main


def _table(out: str, title: str) -> tuple[str, list[str], list[list[str]]]:
    """(the title line, the headers, the rows' cells) of the table titled ``title``."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    head = next(i for i in range(at, len(lines)) if lines[i].startswith("┃"))
    rows = []
    for line in lines[head + 2:]:
        if not line.startswith("│"):
            break
        rows.append([c.strip() for c in line.strip("│").split("│")])
    return lines[at], [c.strip() for c in lines[head].strip("┃").split("┃")], rows


@pytest.mark.parametrize("columns", [200, 80])
def test_the_device_table_of_one_module_keeps_its_numbers(traces_dir: Path, capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch, columns: int):
    """JAX's XSpace of a jitted step against JAX's own Chrome trace of it: every device row
    is an op of ``jit_step``. Before, the table showed only name, Δ%/step, p and change
    even at 200 columns ("Left out to fit 200 columns: n A, ... A/step, B/step"), its names
    cut as ``jit_st…/all-reduce.2`` and its title without the module: the width wanted
    for the names was measured on ``jit_step/all-reduce.2``, the table showed
    ``all-reduce.2``, so the wanted width was never reached and every optional column
    went."""
    job = traces_dir / "jax_cpu_job"
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["diff", str(job / "rank0.xplane.pb.gz"), str(job / "jax_own" / "rank0.trace.json.gz"),
                 "-n", "8"]) == 0
    out = capsys.readouterr().out
    title, heads, rows = _table(out, "Device activity")
    assert "module: jit_step" in title, title
    names = [r[0] for r in rows]
    assert "all-reduce.2" in names and "dot.1" in names and not any("jit_st" in n or "…" in n for n in names), names
    assert {"A/step", "B/step"} <= set(heads), heads
    if columns == 200:  # every column fits, as in the ops table beside it
        assert heads == ["name", "n A", "n B", "total A", "total B", "Δ total", "A/step", "B/step", "Δ%/step", "p",
                         "change"], heads
        assert "Left out to fit" not in out, out
    assert all(len(line) <= columns for line in out.splitlines() if line.startswith(("┃", "│"))), out


def test_the_rank_files_of_one_job_are_not_taken_for_runs(traces_dir: Path, capsys: pytest.CaptureFixture):
    """``fast.rank0 fast.rank1 -- slow.rank0 slow.rank1``: ranks 0 and 1 of one 2-rank job
    a side (each file's distributedInfo says so). Before, each file was read as a run of
    its side, rank 1 as a replicate of rank 0, and the diff found no change (p=1) where
    aten::mm took 25x longer; the two jobs given as directories find 8 changes. A run is
    a file, a directory of its rank files or a store (docs/analysis.md): the command now
    refuses, naming the files and how to give a job."""
    d = traces_dir / "gloo_ddp_compute"
    files = [str(d / f"{run}.rank{r}.pt.trace.json.xz") for run in ("fast", "slow") for r in (0, 1)]
    assert main(["diff", files[0], files[1], "--", files[2], files[3], "-n", "0"]) == 1
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured
    assert "fast.rank0.pt.trace.json.xz" in err and "fast.rank1.pt.trace.json.xz" in err, err
    assert re.search(r"ranks 0-1 of one job", err) and "distributedInfo" in err, err
    assert "directory" in err and "diff jobA/ jobB/" in err, err


def test_runs_of_one_rank_each_are_still_runs(traces_dir: Path, capsys: pytest.CaptureFixture):
    """The documented ``A1 A2 -- B1 B2`` of one-rank traces: rank 0 of each of the runs
    ``even``, ``late`` and ``mid`` of tests/data/traces/gloo_ddp (each file names rank 0)
    are replicates, as before."""
    d = traces_dir / "gloo_ddp"
    a = [str(d / f"{run}.rank0.pt.trace.json.gz") for run in ("even", "late")]
    assert main(["diff", *a, "--", str(d / "mid.rank0.pt.trace.json.gz"), "-n", "0"]) == 0
    out = capsys.readouterr().out
    assert "A = 2 runs, 2 trace(s)" in out and "B = 1 trace(s)" in out, out


def test_the_api_refuses_the_rank_files_of_one_job_as_runs(traces_dir: Path):
    """``polyprof.diff`` with ``Runs`` of one-rank TraceSets that are ranks 0 and 1 of one
    job: the same refusal as the command's, before any rank is read (before: only the
    command refused; the API found no change where aten::mm took 25x longer)."""
    import polyprof
    from polyprof.analyze.diff import Runs, diff

    d = traces_dir / "gloo_ddp_compute"
    a, b = ([polyprof.load_ranks(str(d / f"{run}.rank{r}.pt.trace.json.xz")) for r in (0, 1)] for run in ("fast", "slow"))
    with pytest.raises(polyprof.PolyprofError, match=r"side A are ranks 0-1 of one job \(their distributedInfo\)"):
        diff(Runs(a), Runs(b))
    assert diff(Runs(a[:1]), Runs(b[:1])).overview["a"]["traces"] == 1
