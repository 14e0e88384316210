"""rocprofv3's thread trace (``--att``) JSON files, written for ROCprof Compute Viewer
into ``ui_output_agent_<a>_dispatch_<d>/``, are refused saying what they are and what to
give polyprof instead (formats/rocprof_compute.py), not as JSON that is "not a
Chrome/Kineto trace", and a directory's listing names them so. No licensed sample holds
them: the files are made here in the shape rocprofiler-sdk's att-tool writes them
(``filenames.cpp``, ``code.cpp``, ``occupancy.cpp`` of ROCm/rocm-systems, MIT), a line
of each, as ``test_rocprof_compute_files.py`` makes the thread trace's CSV."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import PolyprofError, TraceFormatError
from polyprof.formats.detect import why_not_a_trace
from polyprof.formats.rocprof_compute import GIVE

#: each viewer file -> its content (one row of each) and the words that say what it holds
FILES = {
    "filenames.json": ({"global_begin_time": 0, "gfxv": "vega", "gfxip": 9, "version": "1.1.0", "counter_names": [],
                        "wave_filenames": {"0": {"0": {"0": {"0": ["se0_sm0_sl0_wv0.json", 10, 20]}}}},
                        "other_simd_filenames": None, "shaderdata_filenames": None}, "the index of its files"),
    "code.json": ({"code": [["s_endpgm", 0, 1, "", 1, 18432, 1, 4, 0, 0, 0, 1, 0, [0, 0]]], "version": "1.1.0",
                   "header": "ISA, _, LineNumber, Source, Codeobj, Vaddr, Hit, Latency, Stall, Idle, ServiceType, "
                             "Issued, Stalled, NotIssuedReasons"},
                  "the kernel's instructions with their hit counts and latencies"),
    "occupancy.json": ({"0": [[10, 0, 0, 0, 1, 1]], "dispatches": {"0": "0 / 0x0", "1": "vecCopy"}, "version": "3.0.0"},
                       "the waves' occupancy over time"),
    "se0_sm0_sl0_wv0.json": ({"data": []}, "one wave's instructions, timed in shader clock cycles"),
}


@pytest.fixture
def att_dir(tmp_path: Path) -> Path:
    """A dispatch's viewer directory, as rocprofv3 --att -d OUT writes it under OUT."""
    d = tmp_path / "ui_output_agent_4242_dispatch_1"
    d.mkdir()
    for name, (doc, _) in FILES.items():
        (d / name).write_text(json.dumps(doc))
    return d


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_viewer_file_says_what_it_is(att_dir: Path, name: str) -> None:
    path = att_dir / name
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(path)
    problem = e.value.problem
    assert str(path) in str(e.value)
    assert problem.startswith("rocprofv3's thread trace (--att) output of one kernel dispatch, for ROCprof "
                              f"Compute Viewer ({name}: {FILES[name][1]})"), problem
    assert problem.endswith(GIVE) and "Chrome/Kineto" not in problem


def test_the_index_and_the_code_are_told_by_their_keys_outside_their_directory(tmp_path: Path) -> None:
    """Copied out of their directory: filenames.json by its keys, code.json by its header."""
    for name in ("filenames.json", "code.json"):
        path = tmp_path / name
        path.write_text(json.dumps(FILES[name][0]))
        with pytest.raises(TraceFormatError, match=r"rocprofv3's thread trace \(--att\)"):
            polyprof.load(path)
        assert why_not_a_trace(path) == "rocprofv3 thread trace (--att) output, for ROCprof Compute Viewer"
    other = tmp_path / "config.json"  # any other JSON object is still not a Chrome/Kineto trace
    other.write_text(json.dumps({"header": "x", "code": []}))
    with pytest.raises(TraceFormatError, match="not a Chrome/Kineto trace"):
        polyprof.load(other)
    assert why_not_a_trace(other) == "JSON, not a Chrome/Kineto trace"


def test_a_directory_listing_names_them(att_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(PolyprofError, match="no trace files"):
        polyprof.load_ranks(att_dir)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "code.json (rocprofv3 thread trace (--att) output, for ROCprof Compute Viewer)" in said
    assert "JSON, not a Chrome/Kineto trace" not in said


def test_the_thread_trace_csv_with_its_later_columns_says_what_it_is(tmp_path: Path) -> None:
    """Later decoders add ServiceType, Issued and Stalled before Source (att-tool's code.cpp)."""
    att = tmp_path / "stats_ui_output_agent_4242_dispatch_1.csv"
    att.write_text('"CodeObj","Vaddr","Instruction","Hitcount","Latency","Stall","Idle","ServiceType","Issued",'
                   '"Stalled","Source"\n1,18432,"s_endpgm",1,4,0,0,0,1,0,""\n')
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(att)
    assert e.value.problem.startswith("rocprofv3's thread trace (--att) statistics"), e.value.problem
