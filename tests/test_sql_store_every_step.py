"""``polyprof sql STORE --all-steps``: every step is a window that cuts nothing of a store
(a store's ranks are queried as stored), so it runs, as before every step became a
window of its own; a step range is still refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROFILE = Path(__file__).parent / "data" / "onnxruntime" / "onnxruntime_profile_matmul_relu.json"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=120)


def test_all_steps_on_a_store_queries_it_whole(tmp_path: Path) -> None:
    store = tmp_path / "s.store"
    assert _cli("convert", str(PROFILE), "-o", str(store)).returncode == 0
    r = _cli("sql", "--csv", str(store), "select count(*) as n from events", "--all-steps")
    assert r.returncode == 0, r.stderr
    assert r.stdout.replace('"', "").split() == ["n", "22"]
    r = _cli("sql", str(store), "select count(*) from events", "--steps", "1:3")
    assert r.returncode != 0 and "do not apply to a store" in r.stderr
