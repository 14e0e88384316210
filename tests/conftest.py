from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
# Test this checkout's code, here and in the subprocesses tests start (CLI runs, scripts),
# even when another copy of polyprof is installed (e.g. an editable install of another
# worktree). `pip install -e .` builds the C extension into src/, so it is found here.
sys.path.insert(0, str(SRC))
os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
TRACES = ROOT / "tests" / "data" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real traces recorded by other tools (tests/data/traces, shipped with the repository)."""
    assert TRACES.is_dir(), f"real traces not found at {TRACES}"
    return TRACES


@pytest.fixture(scope="session")
def kineto_files(traces_dir: Path) -> list[Path]:
    files = sorted((traces_dir / "kineto").glob("*.json.gz"))
    assert files, "no Kineto traces in tests/data/traces/kineto"
    return files


@pytest.fixture(params=["c", "python"])
def section_impl(request, monkeypatch):
    """Run a test once with each ``polyprof.section``: the compiled one and the fallback."""
    import polyprof
    from polyprof.collect import recorder

    if request.param == "c":
        if recorder._fast is None:
            pytest.skip("the _fastsection extension is not built here (test_sections.py checks it should be)")
        cls = recorder._fast.section
    else:
        cls = recorder.PySection
    monkeypatch.setattr(polyprof, "section", cls)
    monkeypatch.setattr(recorder, "section", cls)
    return cls
