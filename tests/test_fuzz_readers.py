"""Fuzzing in CI, bounded: seeded structure-aware mutations of real traces through every
reader in worker processes (a signal or a hang is caught there), and hypothesis-built
documents in process. The promise checked: a Trace or a PolyprofError, nothing else.
The long run (>= 100k inputs per reader) is scripts/fuzz.py; docs/reliability.md has
its results."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polyprof
from polyprof.errors import PolyprofError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import mutators, runner, seeds  # noqa: E402

#: seconds per reader for the bounded run (about 45 s of test time in all, with start-up;
#: POLYPROF_FUZZ_SECONDS=60 or scripts/fuzz.py for a longer run)
SECONDS = float(os.environ.get("POLYPROF_FUZZ_SECONDS", "2"))
CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


@pytest.mark.parametrize("reader", sorted(seeds.READERS))
def test_mutated_real_traces_raise_only_polyprof_errors(reader: str, tmp_path: Path):
    res = runner.run(reader, seed=20261123, seconds=SECONDS, workers=2, deep_every=8, timeout=60,
                     save_dir=tmp_path / "found")
    broken = [f for f in res.findings if f["outcome"] != "net"]
    assert not broken, json.dumps(broken[:5], indent=1)
    assert res.inputs >= 5, res.to_dict()  # it ran at all
    assert res.outcomes["error"] > 0  # and damaged inputs were refused ...
    assert (res.outcomes["ok"] + res.outcomes["error"] + res.outcomes["net"] + res.outcomes["damaged-differs"]
            == res.inputs)


def test_mutators_are_deterministic_and_change_the_input():
    all_seeds = seeds.load_seeds()
    for reader, ss in all_seeds.items():
        a = [mutators.mutate(reader, ss, 5, i) for i in range(12)]
        b = [mutators.mutate(reader, ss, 5, i) for i in range(12)]
        assert a == b
        originals = {d for _, d in ss}
        assert sum(d not in originals for _, d in a) >= 10, reader


def test_the_runner_catches_a_worker_killed_by_a_signal(tmp_path: Path, monkeypatch):
    """The crash path itself: a worker that dies mid-input is reported as a crash, with
    the input saved, and the run goes on with a fresh worker."""
    hook = tmp_path / "sitecustomize.py"
    hook.write_text("import os, signal, sys\n"
                    "if sys.argv[-1:] == ['--worker']:\n"
                    "    import polyprof.formats.detect as d\n"
                    "    real = d.load\n"
                    "    def load(path, **kw):\n"
                    "        if os.path.getsize(path) % 3 == 0:\n"
                    "            os.kill(os.getpid(), signal.SIGSEGV)\n"
                    "        return real(path, **kw)\n"
                    "    d.load = load\n"
                    "    import polyprof\n"
                    "    polyprof.load = load\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the workers' scratch directories
    res = runner.run("native", seed=3, count=8, workers=1, deep_every=0, timeout=60, save_dir=tmp_path / "found")
    crashes = [f for f in res.findings if f["outcome"] == "crash"]
    assert res.inputs == 8 and crashes
    for f in crashes:  # the file the worker was loading when it died
        assert "-11" in f["detail"] and Path(f["file"]).stat().st_size % 3 == 0
    assert not list((tmp_path / "tmp").iterdir())  # dead and stopped workers' scratch removed (they leaked)


_MUTATE_DAMAGED = """
import random, sys
from pathlib import Path
from fuzz import mutators
for p in sorted(Path(sys.argv[1]).glob("*-40325.*")) + sorted(Path(sys.argv[1]).glob("segfault-*")):
    reader = "journal" if p.name.endswith(".partial") else "native"
    for i in range(1000):  # without validation, Random(701) crashes on the 40325 input
        try:
            mutators.MUTATORS[reader](p.read_bytes(), random.Random(i), [])
        except Exception:  # mutate() falls back to byte-level edits on these
            pass
"""


def test_mutators_survive_damaged_input():
    """A stacked second round mutates damaged output: the journal mutator read its
    batches unvalidated and pyarrow crashed the long run's parent with SIGSEGV (journal
    input 40325 of seed 1: its first round is in the corpus). Replayed on it and on the
    inputs that crashed the journal reader."""
    r = subprocess.run([sys.executable, "-c", _MUTATE_DAMAGED, str(CORPUS / "journal")],
                       cwd=Path(__file__).parent, env=runner._env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


# ----------------------------------------------------------------------------- hypothesis
_scalar = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False), st.text(max_size=12),
                    st.sampled_from(["X", "B", "E", "i", "s", "f", "M", "C", "b", "e", "kernel", "cpu_op"]))
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=8)
_event = st.fixed_dictionaries({}, optional={k: _json for k in ("ph", "ts", "dur", "pid", "tid", "name", "cat",
                                                                  "args", "id", "bp", "s")})
_doc = st.one_of(st.lists(_event, max_size=8),
                 st.fixed_dictionaries({"traceEvents": st.lists(_event, max_size=8)},
                                       optional={"deviceProperties": _json, "baseTimeNanoseconds": _json,
                                                 "distributedInfo": _json}))

_SETTINGS = settings(max_examples=int(os.environ.get("POLYPROF_FUZZ_EXAMPLES", "40")), deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], derandomize=True)


def _load_or_polyprof_error(path: Path) -> None:
    try:
        polyprof.load(path)
    except PolyprofError:
        pass


@_SETTINGS
@given(doc=_doc, gz=st.booleans())
def test_hypothesis_kineto_documents(tmp_path: Path, doc, gz: bool):
    data = json.dumps(doc).encode()
    path = tmp_path / ("h.json.gz" if gz else "h.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    _load_or_polyprof_error(path)


_i64 = st.integers(min_value=-2**63, max_value=2**63 - 1)
_u64 = st.integers(min_value=0, max_value=2**64 - 1)


@st.composite
def _xspace(draw):
    from polyprof.formats import xplane_pb2

    space = xplane_pb2.XSpace()
    for _ in range(draw(st.integers(1, 3))):
        plane = space.planes.add()
        plane.id = draw(_i64)
        plane.name = draw(st.sampled_from(["/host:CPU", "/device:GPU:0", "/device:TPU:1", "Task Environment",
                                           "/host:metadata", "x"]))
        stat_ids = draw(st.lists(_i64, max_size=3))
        for sid in stat_ids:
            plane.stat_metadata[sid].id = sid
            plane.stat_metadata[sid].name = draw(st.sampled_from(
                ["polyprof.layout", "polyprof.flow_out", "polyprof.flow_in", "polyprof.origin_ns", "polyprof.metadata",
                 "polyprof.category", "profile_start_time", "flow", "correlation_id", "x"]))
        mids = draw(st.lists(_i64, max_size=3))
        for mid in mids:
            plane.event_metadata[mid].id = mid
            plane.event_metadata[mid].name = draw(st.text(max_size=8))
        for _ in range(draw(st.integers(0, 2))):
            line = plane.lines.add()
            line.id, line.timestamp_ns = draw(_i64), draw(_i64)
            line.name = draw(st.sampled_from(["Steps", "XLA Ops", "Stream #1", "Counters", ""]))
            for _ in range(draw(st.integers(0, 3))):
                e = line.events.add()
                e.metadata_id = draw(st.sampled_from(mids) if mids and draw(st.booleans()) else _i64)
                e.offset_ps, e.duration_ps = draw(_i64), draw(_i64)
                for _ in range(draw(st.integers(0, 2))):
                    s = e.stats.add()
                    s.metadata_id = draw(st.sampled_from(stat_ids) if stat_ids and draw(st.booleans()) else _i64)
                    which = draw(st.sampled_from(["int64_value", "uint64_value", "double_value", "str_value",
                                                  "ref_value", "bytes_value"]))
                    value = {"int64_value": _i64, "uint64_value": _u64, "double_value": st.floats(),
                             "str_value": st.sampled_from(["1:2:x", "{", "a", "", "12"]) | st.text(max_size=8),
                             "ref_value": _u64, "bytes_value": st.binary(max_size=8)}[which]
                    setattr(s, which, draw(value))
    return space.SerializeToString()


@_SETTINGS
@given(data=_xspace())
def test_hypothesis_xspace_messages(tmp_path: Path, data: bytes):
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(data)
    _load_or_polyprof_error(path)


@_SETTINGS
@given(header=st.dictionaries(st.sampled_from(["format", "version", "planes", "tracks", "stats", "metadata"]),
                              _json, max_size=6), keep_format=st.booleans())
def test_hypothesis_native_headers(tmp_path: Path, header: dict, keep_format: bool):
    import io
    import zipfile

    seed = (seeds.SEEDS / "host_session.polyprof").read_bytes()
    zin = zipfile.ZipFile(io.BytesIO(seed))
    original = json.loads(zin.read("header.json"))
    if keep_format:
        header = {**original, **header, "format": original["format"]}
    path = tmp_path / "h.polyprof"
    with zipfile.ZipFile(path, "w") as z:
        for name in zin.namelist():
            z.writestr(name, json.dumps(header).encode() if name == "header.json" else zin.read(name))
    _load_or_polyprof_error(path)


def test_journal_cut_at_every_byte_of_its_last_batches(tmp_path: Path):
    """A kill can cut the journal anywhere: every prefix loads or is refused by name,
    and a longer prefix never recovers fewer events."""
    data = (seeds.SEEDS / "killed.polyprof.partial").read_bytes()
    path = tmp_path / "cut.polyprof.partial"
    last = -1
    rnd = random.Random(1)
    cuts = sorted(set(rnd.sample(range(20, len(data)), 150)) | {len(data)})
    for n in cuts:
        path.write_bytes(data[:n])
        try:
            got = polyprof.load(path).n_events
        except PolyprofError:
            got = 0
        assert got >= last or got == 0 and last <= 0, (n, got, last)
        last = max(last, got)
    assert last > 0
