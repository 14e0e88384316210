"""``polyprof summary TARGET --json`` run in this process, its output parsed: for tests
that compare whole and windowed reads without capsys (module fixtures have none)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from polyprof.cli import main


def summary_json(target: Path, *args: str) -> dict:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    with contextlib.redirect_stdout(out):
        assert main(["summary", str(target), "--json", *args]) == 0
    out.flush()
    return json.loads(raw.getvalue())
