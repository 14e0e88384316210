"""Several Kineto JSON files one process recorded (a torch.profiler schedule's cycles
written by ``tensorboard_trace_handler``, Lightning's ``profiler="pytorch"`` training and
validation profiles) are one rank, read as one trace; before, a directory of them was a
job of that many ranks ("rank 1 recorded no collective: not aligned"), and a 2-rank job
with two cycles a rank was four ranks. Files written here as torch 2.13 writes them
(``host_name`` in the header, ``ph``/``cat``/``name``/``pid`` leading each event)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from polyprof.ranks import sources
from polyprof.ranks.sources import TraceFile, assign_ranks, resolve

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _kineto(path: Path, host: str | None, pid: int, steps: list[int], t0: float, rank: int | None = None) -> None:
    doc: dict = {"schemaVersion": 1, "deviceProperties": []}
    if host is not None:
        doc["host_name"] = host
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    ev: list[dict] = [{"ph": "M", "name": "process_name", "ts": t0, "pid": pid, "tid": 0, "args": {"name": "python"}}]
    for i, s in enumerate(steps):
        ts = t0 + i * 1000.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": pid, "tid": pid,
                   "ts": ts, "dur": 900.0, "args": {}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": ts + 100.0,
                   "dur": 500.0, "args": {}})
    doc["traceEvents"] = ev
    path.write_text(json.dumps(doc, indent=1))


def test_one_process_cycles_are_one_trace(tmp_path: Path) -> None:
    _kineto(tmp_path / "vm_7.100.pt.trace.json", "vm", 7, [2, 3], 1e6)
    _kineto(tmp_path / "vm_7.200.pt.trace.json", "vm", 7, [6, 7], 2e6)
    found = resolve(tmp_path)
    assert len(found) == 1, found  # before: two ranks
    src = found[0]
    assert isinstance(src, sources.TraceFiles) and [f.name for f in src.files] == ["vm_7.100.pt.trace.json",
                                                                           "vm_7.200.pt.trace.json"]
    one = sources.one_source_in(tmp_path)  # what the commands read for the directory
    assert isinstance(one, sources.TraceFiles) and one.files == src.files
    t = src.load()
    names = Counter(t.names().tolist())
    assert names["aten::mm"] == 4 and names["ProfilerStep#6"] == 1
    assert len(t.planes) == 1 and len({tr.name for tr in t.tracks if tr.tid == 7}) == 1  # one thread, one track
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path)], capture_output=True, text=True,
                         env={"PYTHONPATH": SRC, "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Ranks side by side" not in out.stdout and "not aligned" not in out.stdout
    assert "8 events on 1 plane(s)" in out.stdout  # both files: 4 steps, 4 matmuls


def test_two_processes_stay_two_ranks_and_a_jobs_cycles_join_their_rank(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for rank, pid in ((0, 11), (1, 12)):
        _kineto(job / f"vm_{pid}.100.pt.trace.json", "vm", pid, [2, 3], 1e6, rank)
        _kineto(job / f"vm_{pid}.200.pt.trace.json", "vm", pid, [6, 7], 2e6, rank)
    ranks = resolve(job)
    assert len(ranks) == 2, ranks  # before: four, by order ("several sources name the same rank")
    assert [type(s).__name__ for s in ranks] == ["TraceFiles", "TraceFiles"]
    assert assign_ranks(ranks) == [(0, "distributedInfo"), (1, "distributedInfo")]
    assert sources.one_source_in(job) is None
    # two processes of one host without a rank, and files naming no host (torch before
    # 2.x): a rank each, as before
    for d, host in ((tmp_path / "procs", "vm"), (tmp_path / "old", None)):
        d.mkdir()
        _kineto(d / "a.pt.trace.json", host, 21 if host else 5, [0, 1], 1e6)
        _kineto(d / "b.pt.trace.json", host, 22 if host else 5, [0, 1], 1e6)
        assert [type(s) for s in resolve(d)] == [TraceFile, TraceFile]


def _old_kineto(path: Path, pid: int, t0: float) -> None:
    """A Kineto file as torch 1.8-1.9 wrote it: no ``host_name``, ops of category
    ``Operator``, thread ids as text (tb_plugin's 2021 resnet50 samples)."""
    ev = [{"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": pid, "tid": str(pid), "ts": t0 + i * 1000.0,
           "dur": 500.0, "args": {"External id": i + 1}} for i in range(3)]
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev}, indent=1))


def test_older_torch_files_of_one_process_join_by_the_handlers_name(tmp_path: Path) -> None:
    """Older torch names no host in the header: ``tensorboard_trace_handler``'s default
    file name (``<host>_<pid>.<time>.pt.trace.json``) gives it where the name's pid is the
    file's. Before, a schedule's two cycles of one older-torch process were two ranks."""
    _old_kineto(tmp_path / "node-a_4242.1623143089861.pt.trace.json", 4242, 1e6)
    _old_kineto(tmp_path / "node-a_4242.1623143099861.pt.trace.json", 4242, 2e6)
    found = resolve(tmp_path)
    assert len(found) == 1 and isinstance(found[0], sources.TraceFiles), found
    assert Counter(found[0].load().names().tolist())["aten::mm"] == 6
    # another process of that host, and a name whose number is not the file's pid: a rank each
    other = tmp_path / "other"
    other.mkdir()
    _old_kineto(other / "node-a_4242.1623143089861.pt.trace.json", 4242, 1e6)
    _old_kineto(other / "node-a_4243.1623143099861.pt.trace.json", 4243, 2e6)
    _old_kineto(other / "node-a_99.1623143199861.pt.trace.json", 4242, 3e6)
    assert [type(s) for s in resolve(other)] == [TraceFile, TraceFile, TraceFile]


def test_xz_files_of_one_process_join_and_their_size_is_their_text(tmp_path: Path) -> None:
    """``.json.xz`` files (tb_plugin keeps its samples so) are peeked as gzip ones: one
    process's two cycles are one rank; and the memory check reads their text's size from
    the xz index (it took the compressed size: 66 times too small on tb_plugin's)."""
    import lzma

    from polyprof.ranks.fits import json_text_bytes

    for stamp, t0 in ((100, 1e6), (200, 2e6)):
        plain = tmp_path / f"vm_7.{stamp}.pt.trace.json"
        _kineto(plain, "vm", 7, [stamp, stamp + 1], t0)
        (tmp_path / (plain.name + ".xz")).write_bytes(lzma.compress(plain.read_bytes()))
        plain.unlink()
    found = resolve(tmp_path)
    assert len(found) == 1 and isinstance(found[0], sources.TraceFiles), found
    f = sorted(tmp_path.glob("*.xz"))[0]
    assert json_text_bytes(f) == len(lzma.decompress(f.read_bytes()))
    two = tmp_path / "two_streams.xz"  # streams one after another, zeros between them
    two.write_bytes(lzma.compress(b"a" * 1000) + b"\0" * 8 + lzma.compress(b"b" * 5000))
    assert json_text_bytes(two) == 6000


def test_the_time_between_a_processs_files_is_not_analysed(tmp_path: Path) -> None:
    """Each file is one recording (a schedule's cycle): the second begins 1 s after the
    first one's last step, time nobody recorded. Before, the summary's span ran over it
    (step time and idle counted the unrecorded second); now the files' stretches are the
    schedule's (``windows_ns``) and the steps recorded in them are analysed, as a torch
    schedule's cycles in one file are. A process's files without steps are analysed as
    the time they recorded (a wild trace's four cycles: "idle 96%" over 2.84 s, of which
    1.41 s between the files)."""
    _kineto(tmp_path / "vm_7.100.pt.trace.json", "vm", 7, [2, 3], 1e6)
    _kineto(tmp_path / "vm_7.200.pt.trace.json", "vm", 7, [6, 7], 1e6 + 3000.0)
    t = sources.one_source_in(tmp_path).load()
    assert t.metadata["schedule"] == {"by": "its files", "windows_ns": [[1_000_000_000, 1_001_900_000],
                                                                       [1_003_000_000, 1_004_900_000]]}
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path), "--json"], capture_output=True,
                         text=True, env={"PYTHONPATH": SRC, "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["overview"]["window"] == "all 4 steps (2-3, 6-7) (the steps its files recorded; the 1.1 ms between " \
        "its 2 recorded stretches is not analysed)", doc["overview"]
    assert doc["overview"]["recorded_in_span_ns"] == 2 * 1_900_000, doc["overview"]
    assert [r["step"] for r in doc["tables"]["step_stats"]["records"]] == [2, 3, 6, 7]


def test_a_processs_files_without_steps_are_the_time_they_recorded(tmp_path: Path) -> None:
    for i, t0 in enumerate((1e6, 1e6 + 5000.0)):
        ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": t0 + k * 100.0, "dur": 50.0}
              for k in range(10)]
        (tmp_path / f"vm_7.{i}.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "host_name": "vm",
                                                                      "traceEvents": ev}))
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path), "--json"], capture_output=True,
                         text=True, env={"PYTHONPATH": SRC, "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    ov = json.loads(out.stdout)["overview"]
    assert ov["window"] == "the time its 2 files recorded, 1.9 ms; the 4.05 ms between its 2 recorded stretches is " \
        "not analysed", ov
    assert ov["recorded_in_span_ns"] == 2 * 950_000, ov


def test_the_exports_keep_the_stretches(tmp_path: Path) -> None:
    """The Kineto, Chrome and Perfetto exports carry the trace's ``schedule``, its
    stretches on the export's own times (``formats/export_notes.notes``): before, the
    summary of an export of a process's files, or of a schedule's cycles, ran over the
    time between them (a wild trace's: idle 96.30% where the trace's reads 92.63%)."""
    import polyprof

    d = tmp_path / "run"
    d.mkdir()
    _kineto(d / "vm_7.100.pt.trace.json", "vm", 7, [2, 3], 1e6)
    _kineto(d / "vm_7.200.pt.trace.json", "vm", 7, [6, 7], 1e6 + 3000.0)

    def overview(path: Path) -> tuple:
        out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path), "--json"], capture_output=True,
                             text=True, env={"PYTHONPATH": SRC, "PATH": ""}, timeout=120)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        return (doc["overview"]["window"], doc["overview"]["recorded_in_span_ns"],
                [r["step"] for r in doc["tables"]["step_stats"]["records"]])

    want = overview(d)
    assert want[1] == 3_800_000
    trace = sources.one_source_in(d).load()
    for fmt, name in (("kineto", "x.json"), ("chrome", "x.chrome.json"), ("perfetto", "x.pftrace")):
        out = polyprof.export(trace, tmp_path / name, fmt)
        assert overview(out) == want, fmt
