"""The registry's input checks (analyze/inputs.py): an analysis whose inputs a trace
lacks gives its declared empty table without its module being imported, and that
table is exactly what the analysis itself returns there (names, order, dtypes).

Data: real traces of tests/data (XSpace of a JAX conv on GPU, TraceLens, MIT; a gloo
run, a CUPTI counter trace, a vLLM CUDA-graph replay)."""

from __future__ import annotations

import importlib
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


def test_the_checks_cover_the_analyses_imported_only_for_their_table():
    assert {a.name for a in CHECKED} == {"cuda_graphs", "cupti_counters", "collective_stats", "transfers"}


@pytest.mark.parametrize("a", CHECKED, ids=lambda a: a.name)
def test_declared_empty_table_is_what_the_analysis_returns_without_its_inputs(a, xspace):
    assert not importlib.import_module("polyprof.analyze.inputs").__dict__[a.present.partition(":")[2]](xspace)
    direct = _direct(a, xspace)
    declared = a.run(xspace)
    assert len(direct) == 0 and len(declared) == 0
    assert _shape(declared) == _shape(direct)


@pytest.mark.parametrize("a", CHECKED, ids=lambda a: a.name)
def test_with_its_inputs_the_analysis_runs(a):
    check = a.present.partition(":")[2]
    trace = polyprof.load(HAVING[check])
    assert getattr(importlib.import_module("polyprof.analyze.inputs"), check)(trace)
    got, direct = a.run(trace), _direct(a, trace)
    assert _shape(got) == _shape(direct) and len(got) == len(direct)
    if a.name != "transfers":  # gloo_rank0 has collectives, no point-to-point transfers
        assert len(got) > 0
