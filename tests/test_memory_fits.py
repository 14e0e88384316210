"""The memory pre-check (ranks/fits.py, docs/reliability.md "Memory"): the estimate per
command, the memory counted as available (a cgroup's inactive page cache is free: the
kernel drops it before it kills), and a refusal said in one line by every command that
reads a whole trace. The /proc and cgroup samples are real files' text (cgroup v1 from
this test machine, v2 from a systemd slice, /proc/meminfo from a 23 GiB host), cut."""

from __future__ import annotations

import os
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
    """The peaks measured on the audit's generated Kineto traces (docs/reliability.md):
    each estimate at or above its peak (MiB of JSON text -> MiB of peak RSS)."""
    measured = {  # command: [(text MiB, peak MiB)]
        "summary": [(85.0, 125.6), (342.5, 383.6), (1726.0, 1696.0)],
        "summary-json": [(85.0, 267.2), (342.5, 952.6), (1726.0, 4258.1)],
        "report": [(85.0, 257.6), (342.5, 932.6)],
        "export": [(85.0, 523.0), (342.5, 1999.5)],
        "diff": [(170.0, 101.6), (685.0, 259.7)],
    }
    for command, points in measured.items():
        for text, peak in points:
            need = fits.json_need(int(text * MIB), command) / MIB
            assert peak <= need <= 2 * peak + 150, (command, text, peak, need)
    assert fits.json_need(100 * MIB, "summary-json") > fits.json_need(100 * MIB, "summary")


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
