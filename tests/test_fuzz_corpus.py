"""The regression corpus: every input that broke a reader (tests/data/corpus/<reader>/),
the issue's own examples (``issue-*``) and the fuzz seeds. Each gives a Trace or one
TraceFormatError naming the file through the API, and a result or one line (exit 1, no
traceback) through ``summary``, ``report`` and ``export``; files named ``valid-*`` and
the seeds must load.

Names say what the file broke before it was fixed: ``segfault-*`` killed the
interpreter (damaged Arrow buffers in a journal), ``later-stage-*`` loaded but broke a
summary, report or export, the others name the exception and the line that leaked it.
New finds of scripts/fuzz.py go here once fixed."""

from __future__ import annotations

from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main
from polyprof.errors import TraceFormatError
from polyprof.formats.safety import ForeignError

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
FILES = sorted(p for p in CORPUS.glob("*/*") if p.is_file())
EXPORTS = ["chrome", "kineto", "xspace", "polyprof", "perfetto", "parquet", "tensorboard"]  # every writer


def test_the_corpus_has_every_reader_and_the_issue_examples():
    dirs = {p.parent.name for p in FILES}
    assert {"kineto", "xspace", "native", "journal", "seeds"} <= dirs
    names = {p.name for p in FILES}
    assert sum(n.startswith("segfault-") for n in names) >= 3
    assert {"issue-ts-beyond-int64.json", "valid-first-plane-91-bytes.pb", "issue-crc-error.polyprof"} <= names


def _must_load(path: Path) -> bool:
    return path.name.startswith("valid-") or path.parent.name == "seeds"


NETS = [p for p in FILES if p.name.startswith("net-")]


@pytest.mark.parametrize("path", NETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_what_the_last_net_caught_is_now_refused_by_name(path: Path):
    """Each ``net-*`` input was refused only by the last net in a long run (e.g. a Kineto
    ``"ts": []`` became a 2-D time column): its reader now names the problem, or
    drops the damaged part and loads."""
    try:
        polyprof.load(path)
    except TraceFormatError as e:
        assert not isinstance(e, ForeignError), e.problem
        assert str(path) in str(e)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_load_gives_a_trace_or_one_named_error(path: Path):
    try:
        trace = polyprof.load(path)
    except TraceFormatError as e:
        assert not _must_load(path), f"a valid file was refused: {e}"
        assert e.path == str(path) and str(e).startswith(f"{path}: ")
        assert "\n" not in e.problem
        return
    assert trace.n_events >= 0
    if _must_load(path):  # events, or counters only (torch's memory timeline)
        assert trace.n_events > 0 or len(trace.counters["ts_ns"]) > 0


def test_the_issue_examples_say_what_is_wrong():
    k = CORPUS / "kineto"
    # a time beyond +-2**62 ns: that event dropped and counted, as the other readers drop such
    # rows (before: the whole file refused for one event)
    t = polyprof.load(k / "issue-ts-beyond-int64.json")
    assert t.n_events == 0 and any("1 events whose ts is beyond +-2**62 ns" in str(w)
                                   for w in t.metadata["warnings"]), t.metadata["warnings"]
    with pytest.raises(TraceFormatError, match="member 'events.arrow' cannot be read.*CRC"):
        polyprof.load(CORPUS / "native" / "issue-crc-error.polyprof")
    with pytest.raises(TraceFormatError, match="corrupt gzip data"):
        polyprof.load(CORPUS / "xspace" / "issue-damaged-gzip.xplane.pb.gz")
    t = polyprof.load(k / "issue-unhashable-pid-tid.json")  # odd ids are names, not a crash
    assert t.n_events == 1
    t = polyprof.load(k / "issue-deviceproperties-not-a-list.json")
    assert t.n_events == 1 and "deviceProperties" not in t.metadata


@pytest.mark.parametrize("n", [91, 123])
def test_xspace_whose_first_plane_looks_like_json_loads_as_xspace(n: int):
    path = CORPUS / "xspace" / f"valid-first-plane-{n}-bytes.pb"
    assert path.read_bytes()[:2] == (b"\n[" if n == 91 else b"\n{")
    t = polyprof.load(path)
    assert t.metadata["source"]["format"] == "xspace" and t.n_events == 1


def test_segfaulting_journals_keep_the_batches_before_the_damage():
    for path in sorted((CORPUS / "journal").glob("segfault-*")):
        try:
            t = polyprof.load(path)
        except TraceFormatError as e:
            assert "journal" in str(e)
            continue
        assert any("dropped" in w or "damaged" in w for w in t.metadata["warnings"]), t.metadata["warnings"]


def test_readers_refuse_the_corpus_by_their_own_checks_mostly():
    """The last net (ForeignError) is there for what no check foresaw; the corpus of
    past finds must be refused by named checks, bar a few."""
    nets = []
    for path in FILES:
        try:
            polyprof.load(path)
        except ForeignError as e:
            nets.append(f"{path.name}: {e.problem}")
        except TraceFormatError:
            pass
    assert len(nets) <= len(FILES) // 10, nets


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cli_summary_report_export_give_a_result_or_one_line(path: Path, tmp_path: Path, capsys):
    loads = True
    try:
        polyprof.load(path)
    except TraceFormatError:
        loads = False
    commands = [["summary", str(path)], ["report", str(path), "-o", str(tmp_path / "out" / "r.html")]]
    for fmt in EXPORTS if loads else EXPORTS[:1]:
        commands.append(["export", str(path), "-f", fmt, "-o", str(tmp_path / f"e.{fmt}")])
    for argv in commands:
        rc = main(argv)
        err = capsys.readouterr().err
        assert "Traceback" not in err
        errors = [ln for ln in err.splitlines() if ln.startswith("polyprof: error:")]
        if loads:
            assert rc == 0 or (rc == 1 and len(errors) == 1 and "internal error" not in errors[0]), (argv, err)
        else:
            assert rc == 1 and len(errors) == 1 and errors[0].startswith(f"polyprof: error: {path}: "), (argv, err)


def test_an_event_beyond_the_clocks_range_loses_itself_not_the_file(tmp_path):
    """One event with a ts (or dur) beyond +-2**62 ns among good ones: the good ones read,
    the bad ones counted (before: "an event ts of 1e+18 µs is beyond the range of int64
    ns", every event of the file lost)."""
    import json

    ev = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e18, "dur": 5, "cat": "cpu_op"},
          {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "cat": "cpu_op"},
          {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 20, "dur": 1e300, "cat": "cpu_op"},
          {"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 30, "dur": 3, "cat": "cpu_op"}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    t = polyprof.load(path)
    assert sorted(t.strings[i] for i in t.events["name"].tolist()) == ["b", "d"]
    (w,) = [str(w) for w in t.metadata["warnings"] if "not imported" in str(w)]
    assert "1 X events whose dur is beyond +-2**62 ns" in w and "1 events whose ts is beyond +-2**62 ns" in w, w


def test_a_byte_order_mark_before_the_json_is_skipped(tmp_path):
    """A UTF-8 byte-order mark (Windows editors write one; Python's json.loads(bytes)
    accepts it) before a Kineto file's text: "unrecognised format" before; read as the
    file without it, plain and gzipped."""
    import gzip

    src = Path(__file__).parent / "data" / "traces" / "kineto" / "triton_example.json.gz"
    text = gzip.open(src).read()
    plain, packed = tmp_path / "bom.json", tmp_path / "bom.json.gz"
    plain.write_bytes(b"\xef\xbb\xbf" + text)
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbf" + text))
    want = polyprof.load(src)
    for path in (plain, packed):
        t = polyprof.load(path)
        assert t.n_events == want.n_events and (t.events["start_ns"] == want.events["start_ns"]).all()


def test_a_truncated_parquet_export_is_named_so(tmp_path):
    """polyprof's Parquet export cut anywhere said "unrecognised format" (the sniff wants
    the magic at both ends)."""
    from polyprof.cli import main

    out = tmp_path / "t.parquet"
    assert main(["export", str(Path(__file__).parent / "data" / "traces" / "kineto" / "triton_example.json.gz"),
                 "-o", str(out)]) == 0
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(out.read_bytes()[: out.stat().st_size // 2])
    with pytest.raises(TraceFormatError, match="a Parquet file cut short: it does not end with its footer"):
        polyprof.load(cut)
