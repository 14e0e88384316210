"""The memory pre-check (ranks/fits.py, docs/reliability.md "Memory"): the estimate per
command, the memory counted as available (a cgroup's inactive page cache is free: the
kernel drops it before it kills), and a refusal said in one line by every command that
reads a whole trace. The /proc and cgroup samples are real files' text (cgroup v1 from
this test machine, v2 from a systemd slice, /proc/meminfo from a 23 GiB host), cut."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polyprof.ranks import fits

KINETO = sorted((Path(__file__).resolve().parent / "data/traces/kineto").glob("*.json.gz"))
NCCL = next(p for p in KINETO if p.name.startswith("a100_nccl"))

MIB = 1 << 20

V1_STAT = """cache 11341824
rss 8671232
rss_huge 0
shmem 9170944
mapped_file 7667712
inactive_anon 0
active_anon 1531904
inactive_file 32768
active_file 2138112
unevictable 16310272
hierarchical_memory_limit 943718400
total_cache 734003200
total_rss 104857600
total_inactive_anon 0
total_active_anon 104857600
total_inactive_file 730000000
total_active_file 4003200
total_unevictable 0
"""

V2_STAT = """anon 104857600
file 734003200
kernel_stack 16384
shmem 0
file_mapped 0
file_dirty 0
active_anon 104857600
inactive_anon 0
active_file 4003200
inactive_file 730000000
unevictable 0
pgfault 23144
"""

MEMINFO = """MemTotal:       24573144 kB
MemFree:         6459876 kB
MemAvailable:   18017500 kB
Buffers:          372924 kB
Cached:         11310132 kB
SwapCached:            0 kB
"""


def _cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str, usage: int, stat: str) -> None:
    (tmp_path / "limit").write_text(limit)
    (tmp_path / "usage").write_text(f"{usage}\n")
    (tmp_path / "memory.stat").write_text(stat)
    monkeypatch.delenv("POLYPROF_MEMORY_AVAILABLE", raising=False)
    monkeypatch.setattr(fits, "_meminfo_available", lambda: 16 << 30)
    monkeypatch.setattr(fits, "_cgroup_files", lambda: [
        (str(tmp_path / "limit"), str(tmp_path / "usage"), str(tmp_path / "memory.stat"))])


@pytest.mark.parametrize("stat", [V1_STAT, V2_STAT], ids=["v1", "v2"])
def test_a_cgroups_inactive_page_cache_counts_as_available(tmp_path, monkeypatch, stat):
    """A 900 MiB cgroup whose usage is 800 MiB, 730 MB of it inactive page cache (a trace
    read once, a file written): about 796 MiB is available, not 100 MiB (the audit's
    F1b: a summary that completes at 388 MB was refused)."""
    _cgroup(tmp_path, monkeypatch, f"{900 * MIB}\n", 800 * MIB, stat)
    assert fits.available_bytes() == 100 * MIB + 730000000
    assert fits._reclaimable(str(tmp_path / "memory.stat")) == 730000000


def test_v1_prefers_the_hierarchys_inactive_file_and_no_limit_is_meminfo(tmp_path, monkeypatch):
    _cgroup(tmp_path, monkeypatch, "max\n", 800 * MIB, V1_STAT)
    assert fits.available_bytes() == 16 << 30  # v2 "max": no limit, the system's MemAvailable
    _cgroup(tmp_path, monkeypatch, "9223372036854771712\n", 800 * MIB, V1_STAT)  # v1's "no limit"
    assert fits.available_bytes() == 16 << 30
    (tmp_path / "memory.stat").unlink()  # unreadable stat: no cache counted
    _cgroup(tmp_path, monkeypatch, f"{900 * MIB}\n", 800 * MIB, "")
    assert fits.available_bytes() == 100 * MIB


def test_meminfo_available_outside_a_cgroup(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO)
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real(meminfo if str(self) == "/proc/meminfo"
                                                                        else self, *a, **k))
    assert fits._meminfo_available() == 18017500 << 10


def test_the_estimate_is_per_command_and_above_the_measured_peaks():
    """The peaks measured (docs/reliability.md, "Memory"): each estimate at or above its
    peak. export and diff by the JSON text (MiB of text -> MiB of peak RSS); summary,
    summary --json and report by what the sample finds (fits.JsonShape, as json_shape
    estimated it for each trace) on three traces whose events per byte differ 4x: before,
    by the text alone, the compact one's summary --json was estimated at 550 MiB and
    peaked at 1,440, the real torch one's at 1,072 and peaked at 338."""
    measured = {  # command: [(text MiB, peak MiB)]
        "export": [(85.0, 523.0), (342.5, 1999.5)],
        "diff": [(170.0, 101.6), (685.0, 259.7)],
    }
    for command, points in measured.items():
        for text, peak in points:
            need = fits.json_need(int(text * MIB), command) / MIB
            assert peak <= need <= 2 * peak + 150, (command, text, peak, need)
    shapes = {  # trace: (text, events, launched, dense, names) as json_shape found them; peaks: summary, --json, report
        "compact (gen_compact.py)": ((167820682, 1525080, 1014973, 158 * MIB, 510118), (630, 1440, 822)),
        "real torch CPU": ((386796763, 909100, 0, 276 * MIB, 383), (334, 338, 980)),
        "k2m (gen_kineto.py)": ((359106617, 2037358, 814138, 333 * MIB, 2116), (384, 953, 933)),
        "k10m (gen_kineto.py)": ((1810192728, 10186790, 4070690, 1665 * MIB, 10580), (1696, 4258, None)),
    }
    for trace, (shape, peaks) in shapes.items():
        for command, peak in zip(("summary", "summary-json", "report"), peaks):
            need = fits.shape_need(fits.JsonShape(*shape), command) / MIB
            assert peak is None or peak <= need <= 1.7 * peak, (trace, command, peak, need)


def test_the_sample_finds_events_and_new_names(tmp_path):
    """The sample's counts scale to the whole file: a real trace's events within 5%; a
    trace whose events all have names of their own has as many names as events, one
    that repeats 300 names about 300."""
    text = gzip.decompress(NCCL.read_bytes())
    shape = fits.json_shape(NCCL)
    assert shape.text == len(text) and abs(shape.events / text.count(b'"ph"') - 1) < 0.05
    for unique, lo, hi in ((True, 0.95, 1.05), (False, 0, 0.01)):
        events = ",".join(f'{{"ph":"X","name":"k{i if unique else i % 300}","ts":{i},"dur":1,"pid":0,"tid":0}}'
                          for i in range(300_000))
        f = tmp_path / "t.json"
        f.write_text('{"traceEvents":[' + events + "]}")
        got = fits.json_shape(f)
        assert f.stat().st_size > 2 * fits.SAMPLE_BYTES
        assert abs(got.events / 300_000 - 1) < 0.05 and lo <= got.names / 300_000 <= hi, got


def test_a_gzip_of_several_members_is_sized_by_its_compression_ratio(tmp_path):
    """``cat a.gz b.gz`` (and bgzip): the trailer's ISIZE is the last member's alone; the
    text's size is estimated from the compression ratio of its first MiB, and the
    refusal says so (before: a 160 MiB text after a 10-byte last member was 0 MiB)."""
    text = gzip.decompress(NCCL.read_bytes())
    for tail in (gzip.compress(b" " * 10), b""):
        f = tmp_path / "two.json.gz"
        half = len(text) // 2
        f.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + tail)
        assert 0.8 * len(text) <= fits.json_text_bytes(f) <= 1.5 * len(text)
    os.environ.pop("POLYPROF_MEMORY_CHECK", None)
    os.environ["POLYPROF_MEMORY_AVAILABLE"] = "1"
    try:
        with pytest.raises(fits.NotEnoughMemoryError, match="compression ratio of its first"):
            fits.check_file(f)
    finally:
        del os.environ["POLYPROF_MEMORY_AVAILABLE"]


@pytest.mark.parametrize("value", ["inf", "1e400", "-5", "nan"])
def test_a_bad_memory_available_is_refused_by_name(monkeypatch, value):
    """inf and 1e400 leaked an OverflowError (int(inf)); -5 was taken as 0 MiB."""
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", value)
    with pytest.raises(fits.PolyprofError, match=f"POLYPROF_MEMORY_AVAILABLE='{value}'"):
        fits.available_bytes()


def test_the_refusal_names_both_sizes_in_mib(monkeypatch):
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", "830")
    monkeypatch.delenv("POLYPROF_MEMORY_CHECK", raising=False)
    with pytest.raises(fits.NotEnoughMemoryError) as e:
        fits.check_fits("t.json", 831 * MIB + 100, "hint")
    assert "needs about 831 MiB" in str(e.value) and "830 MiB is available" in str(e.value)
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", "lots")
    with pytest.raises(fits.PolyprofError, match="POLYPROF_MEMORY_AVAILABLE"):
        fits.available_bytes()


@pytest.mark.parametrize("argv", [["summary", "{t}", "--json"], ["report", "{t}", "-o", "{o}/r.html"],
                                  ["export", "{t}", "-o", "{o}/x.json"], ["diff", "{t}", "{t}"]],
                         ids=["summary", "report", "export", "diff"])
def test_every_whole_trace_command_refuses_in_one_line(tmp_path, argv):
    """A whole process, its available memory made 1 MiB (POLYPROF_MEMORY_AVAILABLE): each
    command that reads a JSON trace whole says so in one line naming the file, exit 1;
    POLYPROF_MEMORY_CHECK=0 goes on (before: only summary checked; report, export and
    diff read the trace and, under a cgroup, were killed without a word)."""
    args = [a.format(t=NCCL, o=tmp_path) for a in argv]
    env = {**os.environ, "POLYPROF_MEMORY_AVAILABLE": "1"}
    env.pop("POLYPROF_MEMORY_CHECK", None)
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], env=env, capture_output=True, text=True,
                       cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert str(NCCL) in lines[0] and "MiB is available" in lines[0] and "POLYPROF_MEMORY_CHECK=0" in lines[0]
    env["POLYPROF_MEMORY_CHECK"] = "0"
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], env=env, capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("argv", [["summary", "{d}"], ["report", "{d}", "-o", "{o}/r.html"],
                                  ["export", "{d}", "-o", "{o}/x.json"], ["diff", "{d}", "{d}"]],
                         ids=["summary", "report", "export", "diff"])
def test_a_directory_of_ranks_is_checked_too(tmp_path, argv):
    """A directory of two real ranks, 1 MiB available: refused in one line, not read
    (before: a directory was never checked, and every command started reading)."""
    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(NCCL, d / f"rank{r}.json.gz")
    args = [a.format(d=d, o=tmp_path) for a in argv]
    env = {**os.environ, "POLYPROF_MEMORY_AVAILABLE": "1"}
    env.pop("POLYPROF_MEMORY_CHECK", None)
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], env=env, capture_output=True, text=True,
                       cwd=tmp_path)
    lines = [x for x in r.stderr.strip().splitlines() if "WARNING" not in x]  # the copies name the same rank
    assert r.returncode == 1 and len(lines) == 1 and "MiB is available" in lines[0], r.stderr


def test_a_trace_that_clearly_fits_is_not_sampled(monkeypatch, tmp_path):
    """Where even the upper bound of any command's need (12 bytes a byte of text, a gzip
    taken at 25x) fits in half the memory, the check reads sizes only: sampling the text
    cost every summary tens of ms. Where it does not, the estimate is made as before."""
    from polyprof.cli.memory_check import check_diff, check_memory

    def sampled(path):
        raise AssertionError(f"sampled {path}")

    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        shutil.copy(NCCL, job / f"rank{r}.json.gz")
    monkeypatch.setattr(fits, "_text_and_sample", sampled)
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str(64 << 10))  # 64 GiB
    check_memory("summary-json", [str(NCCL)])
    check_memory("report", [str(job)])
    check_diff([str(NCCL), str(job)])
    bound = fits.BASE_BYTES + fits.UPPER_PER_BYTE * 25 * NCCL.stat().st_size
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str((2 * bound >> 20) - 1))  # just under: sampled
    with pytest.raises(AssertionError, match="sampled"):
        check_memory("summary", [str(NCCL)])


def test_a_gzip_trace_named_json_is_not_taken_for_plain_text(monkeypatch, tmp_path):
    """The size-only bound read the compression from the name: a gzip file named .json
    counted at its own size and skipped the check it needed; it is told by its first
    bytes. A FIFO among a folder's files is passed over, never opened (it would block)."""
    plain = tmp_path / "trace.json"
    shutil.copy(NCCL, plain)  # gzip bytes, a plain name
    bound = fits.BASE_BYTES + fits.UPPER_PER_BYTE * 25 * plain.stat().st_size
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str((2 * bound >> 20) + 1))
    assert fits.clearly_fits([str(plain)])
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str((2 * bound >> 20) - 1))
    assert not fits.clearly_fits([str(plain)])  # at ratio 1 it had fitted
    os.mkfifo(tmp_path / "pipe")
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str(64 << 10))
    assert fits.clearly_fits([str(tmp_path)]) and not fits.clearly_fits([str(tmp_path / "pipe")])


def test_a_jobs_check_numbers_its_ranks_as_the_command_does(monkeypatch, tmp_path):
    """``report --rank N`` details rank N, and ``--rank-by order`` numbers the files as
    given: the check counts the rank the command will read in detail (before: always the
    lowest rank of the default numbering)."""
    from polyprof.cli.memory_check import check_job
    from polyprof.ranks.sources import assign_ranks, resolve

    small = next(p for p in KINETO if p.name.startswith("triton_example"))
    job = [str(shutil.copy(small, tmp_path / "a.json.gz")), str(shutil.copy(NCCL, tmp_path / "b.json.gz"))]
    ranks = dict(zip(("a.json.gz", "b.json.gz"), (a.rank for a in assign_ranks(resolve(job)))))
    assert ranks["b.json.gz"] < ranks["a.json.gz"]  # (the NCCL trace says it is rank 0)
    needs: list[int] = []
    monkeypatch.setattr(fits, "check_fits", lambda what, need, advice: needs.append(need))
    for kw in ({}, {"rank": ranks["a.json.gz"]}, {"rank_by": "order"}):
        check_job("report", job, jobs=1, **kw)
    lowest, detailed_small, small_first = needs
    assert detailed_small < lowest and small_first == detailed_small, needs


def test_a_long_name_in_the_sample_costs_no_more_than_its_text(tmp_path):
    """The sample's names were found with a pattern of one alternation per byte, whose
    backtracking state held ~136 bytes per byte of a name: a 3 MB string in the first 4 MiB
    took the check from 89 MB to 452 MB, and under a 450 MB limit the check's own
    MemoryError refused a file that reads in 89 MB. Measured in a child: its peak RSS
    grows by less than 40 MiB over the check."""
    import subprocess
    import sys

    path = tmp_path / "long.json"
    path.write_bytes(b'{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":1,"ts":1,"dur":5,"args":{"name":"'
                     + b"A" * 3_000_000 + b'\\"B"}},{"ph":"X","name":"op","pid":1,"tid":1,"ts":9,"dur":5}]}')
    code = ("import resource, sys\nfrom polyprof.ranks.fits import json_shape\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "shape = json_shape(__import__('pathlib').Path(sys.argv[1]))\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, shape.names)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    grown_kib, names = out.stdout.split()
    assert int(grown_kib) < 40 * 1024 and float(names) == 3.0, out.stdout + out.stderr  # k, AA..\"B, op


XSPACE_GZ = Path(__file__).parent / "data" / "h200" / "jax_transformer_h200.xplane.pb.gz"


def test_a_large_xspace_is_checked_by_its_reader(tmp_path):
    """An XSpace is read whole (protobuf has no streaming read): one of 16 MiB or more is
    checked before it is read, by what its reader needs per byte (the H200 JAX transformer,
    1.9 MB gzipped, its text estimated at 16 MiB: about 275 MiB compiled; protobuf's
    Python objects, ``POLYPROF_PURE_PYTHON=1``, more than twice that). Before, no XSpace
    was checked: a large one read by the pure-Python reader was killed without a word
    under a cgroup. A small one is not checked (its summary imports no check:
    tests/test_import_weight.py)."""
    env = {**os.environ, "POLYPROF_MEMORY_AVAILABLE": "100"}
    env.pop("POLYPROF_MEMORY_CHECK", None)

    def summary(path: Path, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], env={**env, **more},
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)

    r = summary(XSPACE_GZ)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert str(XSPACE_GZ) in lines[0] and "an XSpace of 16 MiB read whole by the compiled reader" in lines[0]
    assert "100 MiB is available" in lines[0] and "POLYPROF_MEMORY_CHECK=0" in lines[0]
    assert summary(XSPACE_GZ, POLYPROF_MEMORY_AVAILABLE="300").returncode == 0
    r = summary(XSPACE_GZ, POLYPROF_MEMORY_AVAILABLE="300", POLYPROF_PURE_PYTHON="1")
    assert r.returncode == 1 and "read whole by protobuf's Python objects" in r.stderr, r.stderr
    small = Path(__file__).parent / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
    assert summary(small, POLYPROF_MEMORY_AVAILABLE="1").returncode == 0
