"""Plugin isolation: faulty plugins are reported, everyone else's data survives."""

from __future__ import annotations

import threading
from pathlib import Path
import time

import numpy as np
import pytest

import polyprof
from polyprof.collect.plugin import Plugin, SessionContext
from polyprof.collect.registry import discover
from polyprof.errors import PluginStateError
from polyprof.trace import TraceBuilder


class Good(Plugin):
    name = "good"

    def _start(self, ctx: SessionContext) -> None:
        self.t0 = ctx.now_ns()

    def _stop(self) -> None:
        self.t1 = SessionContext.now_ns()

    def _collect(self):
        b = TraceBuilder()
        t = b.track(b.plane("/device:Fake:0", "device"), "queue 0", "queue")
        b.event(t, "fake kernel", self.t0, self.t1 - self.t0, "kernel")
        return b.build()


def faulty(phase: str, how: str = "raise"):
    class Faulty(Good):
        name = f"faulty-{phase}-{how}"

        def _start(self, ctx):
            super()._start(ctx)
            if phase == "start":
                raise RuntimeError("device exploded at start")

        def _stop(self):
            super()._stop()
            if phase == "stop":
                raise RuntimeError("device exploded at stop")

        def _collect(self):
            if how == "hang":
                threading.Event().wait(60)
            if how == "garbage":
                return {"events": "lots"}
            if how == "malformed":
                tr = super()._collect()
                tr.events["dur_ns"] = np.array([-5])
                return tr
            raise ValueError("cannot convert")

    return Faulty()


def run_with(plugin, timeout=5.0):
    with polyprof.profile(plugins=["host", Good(), plugin], collect_timeout=timeout) as prof:
        with polyprof.section("user work"):
            time.sleep(0.001)
    return prof.trace


@pytest.mark.parametrize("phase, how, expect", [
    ("start", "raise", "device exploded at start"),
    ("stop", "raise", "device exploded at stop"),
    ("collect", "raise", "cannot convert"),
    ("collect", "hang", "timed out"),
    ("collect", "garbage", "not a Trace"),
    ("collect", "malformed", "malformed"),
])
def test_faulty_plugin_is_reported_and_others_survive(phase, how, expect):
    p = faulty(phase, how)
    t0 = time.monotonic()
    tr = run_with(p, timeout=1.0)
    assert time.monotonic() - t0 < 10
    errs = [e for e in tr.metadata["plugin_errors"] if e["plugin"] == p.name]
    assert len(errs) == 1 and errs[0]["phase"] == phase and expect in errs[0]["error"]
    assert tr.metadata["plugins"][p.name] == "failed"
    names = set(tr.names())
    assert "user work" in names and "fake kernel" in names  # host + good plugin intact
    # the faulty plugin contributed nothing half-made
    assert (tr.names() == "fake kernel").sum() == 1


def test_double_start_is_an_error_not_corruption():
    p = Good()
    ctx = SessionContext(start_ns=0, wall_anchor={})
    p.start(ctx)
    with pytest.raises(PluginStateError):
        p.start(ctx)
    p.stop()
    assert p.collect().n_events == 1
    with pytest.raises(PluginStateError):
        p.collect()


def test_same_plugin_twice_in_a_session_starts_once():
    p = Good()
    with polyprof.profile(plugins=["host", p, p]) as prof:
        pass
    tr = prof.trace
    assert (tr.names() == "fake kernel").sum() == 1
    assert any("listed twice" in e["error"] for e in tr.metadata["plugin_errors"])


def test_failure_is_reported_on_stderr(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "s.py"
    script.write_text(
        "import sys; sys.path.insert(0, %r)\n"
        "import polyprof\n"
        "from test_session import faulty\n"
        "with polyprof.profile(plugins=['host', faulty('collect')]): pass\n"
        "print('program finished')\n" % str(Path(__file__).parent))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "program finished" in r.stdout
    assert "faulty-collect-raise" in r.stderr and "cannot convert" in r.stderr


def test_entry_point_discovery_finds_host():
    found = discover()
    assert "host" in found and found["host"].availability.ok
    assert found["host"].target == "polyprof.plugins.host:HostPlugin"


def test_unknown_plugin_name_is_a_clear_error():
    with pytest.raises(polyprof.PolyprofError, match="no plugin named 'nope'"):
        polyprof.profile(plugins=["nope"]).start()
    with polyprof.profile(plugins=["host"]) as prof:  # a failed start leaves no session behind
        pass
    assert prof.trace is not None


def test_default_plugins_that_cannot_run_are_named_in_the_trace():
    code = ("import sys; sys.modules['pyopencl'] = None; import polyprof\n"
            "with polyprof.profile() as p:\n    pass\n"
            "print(p.trace.metadata['plugins'].get('opencl'))")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("unavailable:") and "pyopencl" in r.stdout


def test_process_samples_read_from_proc_agree_with_psutil():
    """The host sampler reads /proc/self/stat itself (psutil's import cost a short run
    17-21 ms); it gives what psutil gives, with a thread started and memory touched."""
    import threading

    import psutil

    from polyprof.plugins.host import _psutil_reader, process_reader

    ours, theirs = process_reader(), _psutil_reader()
    assert ours.__qualname__ != theirs.__qualname__  # Linux: the /proc reader
    halt = threading.Event()
    t = threading.Thread(target=halt.wait)
    t.start()
    try:
        block = bytearray(64 << 20)  # 64 MiB touched: RSS moves
        block[::4096] = b"x" * len(block[::4096])
        a, b = ours(), theirs()
        proc = psutil.Process()
        assert a[2] == b[2] == proc.num_threads()
        assert abs(a[1] - b[1]) < 4 << 20 and a[1] >= 64 << 20
        assert 0 < a[0] and abs(a[0] - b[0]) < 0.5
    finally:
        halt.set()
        t.join()


class Optioned(Good):
    name = "optioned"

    def __init__(self, **options):
        super().__init__(**options)
        self.given = dict(options)


def test_plugin_options_keyed_as_named_in_plugins_are_used_others_warned(caplog):
    target = f"{__name__}:Optioned"
    with caplog.at_level("WARNING", logger="polyprof"):
        s = polyprof.profile(plugins=["host", target], options={target: {"a": 1}, "optioned": {"b": 2}})
        with s:
            pass
    (slot,) = [sl for sl in s._slots if sl.name == "optioned"]
    assert slot.plugin.given == {"a": 1}  # keyed by the target as given in plugins
    warned = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert len(warned) == 1 and "'optioned'" in warned[0]  # the plugin's own name is not its key here


def test_a_description_that_fails_keeps_the_events(monkeypatch, tmp_path):
    """The session's own description failing at its stop (here its note on memory) is a
    plugin error of the session's; the plugins' events and the sections are still the
    trace, written (before: an exception out of ``stop``, nothing written: ``polyprof
    run`` said "internal error")."""
    from polyprof.collect import background

    def broken(errors: object) -> str:
        raise RuntimeError("no /proc here")

    monkeypatch.setattr(background, "memory_note", broken)
    out = tmp_path / "t.polyprof"
    with polyprof.profile(plugins=["host", Good()], output=out) as prof:
        with polyprof.section("kept"):
            pass
    tr = polyprof.load(out)
    assert (tr.names() == "fake kernel").sum() == 1 and (tr.names() == "kept").sum() == 1
    assert {"plugin": "session", "phase": "metadata", "error": "RuntimeError: no /proc here"} \
        in tr.metadata["plugin_errors"]
    assert prof.trace.metadata["session"]["stop_ns"] > prof.trace.metadata["session"]["start_ns"]
