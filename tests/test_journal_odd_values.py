"""A section keyword JSON cannot hold as it is (an int beyond 64 bits, which orjson
refuses even with ``default=str``) never stops the crash journal: before, one such
keyword stopped it for the whole run and a later SIGKILL left a journal of no events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.collect import journal

BIG = 2 ** 70

PROGRAM = """
import os, signal, sys, time
import polyprof

with polyprof.section("odd", big=2 ** 70, nested={"k": 2 ** 80}, fine=3):
    pass
for i in range(20):
    with polyprof.section("work", i=i):
        time.sleep(0.005)
time.sleep(1.0)  # the journal flushes (every 0.1 s here)
if sys.argv[1:] == ["kill"]:
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _run(tmp_path: Path, kill: bool) -> tuple[subprocess.CompletedProcess, Path]:
    script = tmp_path / "odd.py"
    script.write_text(PROGRAM)
    out = tmp_path / ("killed.polyprof" if kill else "whole.polyprof")
    args = ["run", "--plugins", "host", "-o", str(out), str(script), *(["kill"] if kill else [])]
    code = ("import sys; from polyprof.cli import main; from polyprof.plugins import host; "
            f"host.HostPlugin.default_journal_interval_s = 0.1; sys.exit(main({args!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120), out


def test_a_too_large_keyword_does_not_stop_the_journal(tmp_path):
    r, out = _run(tmp_path, kill=True)
    assert r.returncode == -9, r.stderr
    assert "crash journal" not in r.stderr or "stopped" not in r.stderr, r.stderr
    tr = polyprof.load(journal.path_for(out))
    names = list(tr.names())
    assert names.count("work") == 20 and names.count("odd") == 1, r.stderr  # before: 0 events
    df = tr.to_pandas()
    odd = df[df["name"] == "odd"].iloc[0]
    assert odd["big"] == str(BIG)  # as the final trace keeps it: its digits
    assert json.loads(odd["nested"]) == {"k": 2 ** 80}
    assert int(odd["fine"]) == 3
    assert sorted(df.loc[df["name"] == "work", "i"].astype(int)) == list(range(20))


def test_the_journal_holds_what_the_final_trace_holds(tmp_path):
    """The recovered value is the final trace's: a program stopped normally keeps the
    big int as its digits (the nested dict is left out of this one: the trace's own stat
    column refuses it, trace/stats.py)."""
    with polyprof.profile(plugins=["host"]) as prof:
        with polyprof.section("odd", big=BIG):
            pass
    df = prof.trace.to_pandas()
    assert df.loc[df["name"] == "odd", "big"].tolist() == [str(BIG)]


def test_stats_json_never_raises():
    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text")

    deep: list = []
    for _ in range(300):  # beyond orjson's 254 levels
        deep = [deep]
    cycle: dict = {}
    cycle["self"] = cycle
    stats = {"big": BIG, "neg": -BIG, "list": [1, BIG], "dict": {"k": BIG}, "obj": Unprintable(),
             "deep": deep, "cycle": cycle, "ok": 1.5, "np": np.int64(3), "text": "x", "key": {1: 2}}
    out = json.loads(journal._stats_json(stats) or "")
    assert out["big"] == str(BIG) and out["neg"] == str(-BIG)
    assert json.loads(out["list"]) == [1, BIG] and json.loads(out["dict"]) == {"k": BIG}
    assert out["obj"] == "<Unprintable>" and out["cycle"] == "<dict>" and out["deep"].startswith("[[[")
    assert (out["ok"], out["np"], out["text"], out["key"]) == (1.5, 3, "x", {"1": 2})  # the rest as before
    assert journal._stats_json({"a": 1}) == '{"a":1}' and journal._stats_json({}) is None
