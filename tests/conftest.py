from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real traces recorded by other tools (../shared/data/traces)."""
    assert TRACES.is_dir(), f"shared traces not found at {TRACES}"
    return TRACES


@pytest.fixture(scope="session")
def kineto_files(traces_dir: Path) -> list[Path]:
    files = sorted((traces_dir / "kineto").glob("*.json.gz"))
    assert files, "no Kineto traces in shared/data/traces/kineto"
    return files
