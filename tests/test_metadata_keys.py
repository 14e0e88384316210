"""Every metadata key polyprof writes is declared in trace/metadata_keys.py, with its type
and scope: checked on what every reader reads from the real traces (and from what each
writer wrote of them), on live sessions (host, nested, scheduled, OpenCL, torch), and in
the source (a key written or read by its text must be a declared one)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

import polyprof
from polyprof.trace import metadata_keys as mk

DATA = Path(__file__).parent / "data" / "traces"
SRC = Path(__file__).parents[1] / "src" / "polyprof"
TRACES = sorted([*DATA.glob("kineto/*.json.gz"), *DATA.glob("xspace/*.xplane.pb"),
                 *(DATA.parent / "nsys").glob("*.sqlite"), *(DATA.parent / "rocprof").glob("*.json*"),
                 *(DATA.parent / "rocprof").glob("*.db")])


def _document_keys(path: Path) -> set[str]:
    """The top-level fields of a JSON document (kept verbatim by its reader: the file's own)."""
    if ".json" not in path.name:
        return set()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        doc = json.load(f)
    return set(doc) - {"traceEvents"} if isinstance(doc, dict) else set()


def _problems(t: polyprof.Trace, foreign: frozenset[str] | set[str] = frozenset()) -> list[str]:
    out = mk.problems(t.metadata, foreign=foreign)
    for s in t.sources:
        out += [f"source {s.id}: {p}" for p in mk.problems(s.metadata, foreign=foreign)]
        out += [f"source {s.id} clock: {p}" for p in mk.problems(s.clock, mk.CLOCK)]
    return out


def test_an_undeclared_or_mistyped_key_is_caught():
    assert mk.problems({mk.CLOCK_NAME: "wall", mk.SESSION: {}}) == []
    assert mk.problems({"clock_fits": {}}) == ["'clock_fits' is not declared in trace/metadata_keys.py"]
    assert "declared" in mk.problems({mk.RANK: True})[0] and "is a bool" in mk.problems({mk.RANK: True})[0]
    assert mk.problems({"schemaVersion": 1, "tw_job": "x"}, foreign={"tw_job"}) == []
    assert {k.scope for k in mk.DECLARED.values()} == {mk.TRACE, mk.SOURCE}


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_readers_write_only_declared_keys(path, tmp_path):
    t = polyprof.load(path)
    assert _problems(t, _document_keys(path)) == []
    for fmt, suffix in (("polyprof", ".polyprof"), ("kineto", ".json"), ("chrome", ".json"), ("xspace", ".xplane.pb")):
        out = tmp_path / f"{fmt}{suffix}"
        polyprof.export(t, out, format=fmt)
        back = polyprof.load(out)
        assert _problems(back, _document_keys(path) | _document_keys(out)) == [], fmt


def _steps(n: int) -> None:
    for _ in range(n):
        with polyprof.section("work"):
            pass
        polyprof.step()


def test_live_sessions_write_only_declared_keys(tmp_path):
    with polyprof.profile(["host"], schedule="skip_first=1,active=1,repeat=1", output=tmp_path / "s.polyprof") as s:
        with polyprof.profile(["host"]) as inner:  # nested
            _steps(3)
    with polyprof.profile(["host"], schedule="skip_first=9,active=1") as never:  # records no step: a warning
        _steps(2)
    for t in (s.trace, inner.trace, never.trace, polyprof.load(tmp_path / "s.polyprof")):
        assert t is not None and _problems(t) == []
    assert mk.NESTED_IN in inner.trace.metadata and mk.SCHEDULE in s.trace.metadata


def test_opencl_session_writes_only_declared_keys():
    cl = pytest.importorskip("pyopencl")
    np = pytest.importorskip("numpy")
    with polyprof.profile(["host", "opencl"], memory=True) as s:
        ctx = cl.create_some_context(interactive=False)
        q = cl.CommandQueue(ctx)
        a = np.arange(1024, dtype=np.float32)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
        prg = cl.Program(ctx, "__kernel void k(__global float *a) { a[get_global_id(0)] *= 2; }").build()
        prg.k(q, a.shape, None, buf)
        cl.enqueue_copy(q, a, buf)
        q.finish()
    t = s.trace
    assert _problems(t) == []
    assert s.trace.metadata[mk.PLUGINS].get("opencl") == "ok", t.metadata[mk.PLUGIN_ERRORS]
    fits = mk.fits_of(t.metadata, "opencl")  # one convention: plane, then plugin
    assert list(fits) == ["/device:OpenCL:0"] and fits["/device:OpenCL:0"]["n"] > 0


def test_torch_session_writes_only_declared_keys():
    torch = pytest.importorskip("torch")
    with polyprof.profile(["host", "torch"], options={"host": {"sample_interval_s": 0}}) as s:
        torch.nn.Linear(8, 8)(torch.randn(2, 8)).sum().backward()
    t = s.trace
    assert _problems(t) == []
    fits = mk.fits_of(t.metadata, "torch")
    assert fits and all(p is not None and p.startswith("/") for p in fits)
    assert mk.plugin_fit(t.metadata, "torch")["method"].startswith("paired_markers")


#: a metadata access by a literal key: metadata["k"], t.metadata.get("k"), b.metadata.setdefault("k", ...)
#: (a dataclass field's ``f.metadata`` is another thing)
_ACCESS = re.compile(r'(?<!\bf\.)\bmetadata(?:\.get\(|\[|\.setdefault\(|\.pop\()"([A-Za-z_]+)"')


def test_code_names_metadata_keys_by_their_constants():
    """Readers, plugins and analyses name a metadata key by its constant in
    trace/metadata_keys.py (``metadata[mkeys.WARNINGS]``), never by its text."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "``" in line:  # a docstring naming the key
                continue
            for key in _ACCESS.findall(line):
                how = "its constant" if key in mk.DECLARED else "a constant declared in trace/metadata_keys.py"
                bad.append(f"{path.relative_to(SRC)}:{i}: {key!r} (use {how})")
    assert bad == []
    # and the check sees a literal key at all
    assert _ACCESS.findall('x = trace.metadata.get("clock_fits")') == ["clock_fits"]
