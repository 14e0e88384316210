"""The load's progress bar counts the parse in bytes and a stage in its steps: the
build stage read "build ━━━ 3/5 bytes" (an auditor, exporting a 1.2M-event trace)."""

from __future__ import annotations

import io
from pathlib import Path

from polyprof.formats.kineto.progress import _Progress


def test_a_stage_counts_steps_and_the_parse_bytes() -> None:
    bar = _Progress(True, Path("big.json"), 2_000_000)
    assert bar.bar is not None
    bar.bar.console.file = io.StringIO()
    try:
        amount = bar.bar.columns[2]
        bar.advance(1_000_000)
        assert str(amount.render(bar.bar.tasks[0])) == "1.0/2.0 MB"
        bar.stage("build", 5)
        bar.advance(3)
        assert str(amount.render(bar.bar.tasks[0])) == "3/5"
        bar.stage("scan big.json", 2_000_000, of_bytes=True)  # (a store's conversion: a pass over the file)
        bar.advance(500_000)
        assert str(amount.render(bar.bar.tasks[0])) == "0.5/2.0 MB"
    finally:
        bar.stop()
