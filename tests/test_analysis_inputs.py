"""The registry's input checks (analyze/inputs.py): an analysis whose inputs a trace
lacks gives its declared empty table without its module being imported, and that
table is exactly what the analysis itself returns there (names, order, dtypes).

Data: real traces of tests/data (XSpace of a JAX conv on GPU, TraceLens, MIT; a gloo
run, a CUPTI counter trace, a vLLM CUDA-graph replay)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.registry import ANALYSES, Analysis
from polyprof.analyze.table import Table

DATA = Path(__file__).parent / "data"
XSPACE = DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"
HAVING = {  # a trace that holds each check's input
    "graph_launches": DATA / "peers" / "tracelens" / "vllm_decode_full_graph_execution.json.gz",
    "profiler_ranges": DATA / "traces" / "kineto" / "a100_cupti_counters.json.gz",
    "communication": DATA / "traces" / "gloo" / "gloo_rank0.json.gz",
    "copies": DATA / "nsys" / "saxpy_2022.sqlite",
}
CHECKED = [a for a in ANALYSES if a.present]


def _direct(a: Analysis, trace: polyprof.Trace) -> Table:
    module, _, fn = a.function.partition(":")
    out = getattr(importlib.import_module(module), fn)(trace)
    assert isinstance(out, Table)
    return out


def _shape(t: Table) -> list[tuple[str, str]]:
    return [(c, t[c].dtype.str) for c in t.columns]


@pytest.fixture(scope="module")
def xspace() -> polyprof.Trace:
    return polyprof.load(XSPACE)


@pytest.fixture(scope="module")
def jax_cpu() -> polyprof.Trace:
    """An XSpace without allocator events (the GPU one's are memory events)."""
    return polyprof.load(DATA / "jax_cpu" / "jax_cpu_steps.xplane.pb")


def test_the_checks_cover_the_analyses_imported_only_for_their_table():
    assert {a.name for a in CHECKED} == {"cuda_graphs", "cupti_counters", "collective_stats", "transfers",
                                         "memory_peak", "memory_at_peak", "copies"}


@pytest.mark.parametrize("a", CHECKED, ids=lambda a: a.name)
def test_declared_empty_table_is_what_the_analysis_returns_without_its_inputs(a, xspace, jax_cpu):
    xspace = jax_cpu if a.name.startswith("memory") else xspace
    assert not importlib.import_module("polyprof.analyze.inputs").__dict__[a.present.partition(":")[2]](xspace)
    direct = _direct(a, xspace)
    declared = a.run(xspace)
    assert len(direct) == 0 and len(declared) == 0
    assert _shape(declared) == _shape(direct)


#: memory events as torch writes them (the shared Kineto traces have none; a CUDA trace
#: cannot be made here): an allocation and its free on a GPU, one on the host
MEMORY_EVENTS = {"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 7, "tid": 7, "ts": 101.0, "dur": 5.0},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 102.0,
     "args": {"Total Reserved": 2097152, "Total Allocated": 1049600, "Bytes": 1048576, "Device Id": 0,
              "Device Type": 1, "Addr": 139800000000000}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 103.0,
     "args": {"Total Reserved": 0, "Total Allocated": 512, "Bytes": 512, "Device Id": -1, "Device Type": 0,
              "Addr": 94000000000000}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 160.0,
     "args": {"Total Reserved": 2097152, "Total Allocated": 1024, "Bytes": -1048576, "Device Id": 0,
              "Device Type": 1, "Addr": 139800000000000}}]}


@pytest.mark.parametrize("a", CHECKED, ids=lambda a: a.name)
def test_with_its_inputs_the_analysis_runs(a, tmp_path):
    check = a.present.partition(":")[2]
    if check == "memory_events":
        (tmp_path / "m.json").write_text(json.dumps(MEMORY_EVENTS))
    trace = polyprof.load(tmp_path / "m.json" if check == "memory_events" else HAVING[check])
    assert getattr(importlib.import_module("polyprof.analyze.inputs"), check)(trace)
    got, direct = a.run(trace), _direct(a, trace)
    assert _shape(got) == _shape(direct) and len(got) == len(direct)
    if a.name != "transfers":  # gloo_rank0 has collectives, no point-to-point transfers
        assert len(got) > 0
