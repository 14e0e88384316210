"""An installed plugin that is broken before it records: its import or availability
check hangs (a wedged driver) or its import fails. The profiler never waits for it
beyond the probe's limit (``POLYPROF_PROBE_TIMEOUT``), and says what happened: in
``polyprof plugins``, in a run's trace (``plugin_errors``, ``metadata["plugins"]``, the
summary), and in the kit (which checks another plugin without asking this one). Also:
the plugins' stop happens at once, so one stop that hangs does not keep the others
recording; the kit's ``--json`` is JSON when a plugin prints.

The vendor packages are real ones as pip leaves them: a module and a dist-info whose
entry_points.txt names it, on ``sys.path`` (PYTHONPATH for the commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect import registry
from polyprof.collect.plugin import Plugin
from polyprof.collect.session import Session
from polyprof.trace.builder import TraceBuilder

ROOT = Path(__file__).resolve().parents[1]

VENDOR = '''
import os, sys, threading, time
from polyprof.collect.plugin import Availability, Plugin
from polyprof.trace.builder import TraceBuilder

#: set by an in-process test to let the hanging check return
GATE = threading.Event()

class _Quiet(Plugin):
    device_kinds = ("PRB",)
    def _start(self, ctx): pass
    def _stop(self): pass
    def _collect(self): return TraceBuilder().build()

class HangCheck(_Quiet):
    """A driver query that never returns."""
    name = "prb-hangcheck"
    @classmethod
    def availability(cls):
        GATE.wait(float(os.environ.get("PRB_HANG_S", "3600")))
        return Availability(True)

class Printer(_Quiet):
    """Prints on stdout from Python and from the file descriptor, as C code would."""
    name = "prb-printer"
    default = False
    def _start(self, ctx):
        print("PRINTED BY THE PLUGIN")
        sys.stdout.flush()
        os.write(1, b"WRITTEN TO FD 1 BY THE PLUGIN\\n")
'''

BROKEN = 'raise ImportError("prb driver bindings missing")\n'
HANGS = 'import time\ntime.sleep(3600)\n'


ENTRY_POINTS = {"prb-hangcheck": "prb_polyprof:HangCheck", "prb-badimport": "prb_polyprof.broken:Nope",
                "prb-hangimport": "prb_polyprof.hangs:Nope", "prb-printer": "prb_polyprof:Printer"}


def _site(tmp_path: Path, *names: str) -> Path:
    """prb_polyprof as pip leaves it, with the entry points ``names``: prb-hangcheck
    (availability hangs), prb-badimport (its module raises ImportError), prb-hangimport
    (its module's import hangs), prb-printer (prints; not a default plugin)."""
    site = tmp_path / "site"
    pkg = site / "prb_polyprof"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(VENDOR)
    (pkg / "broken.py").write_text(BROKEN)
    (pkg / "hangs.py").write_text(HANGS)
    info = site / "prb_polyprof-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: prb-polyprof\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[polyprof.plugins]\n" + "".join(f"{n} = {ENTRY_POINTS[n]}\n" for n in names))
    (tmp_path / "prog.py").write_text("import polyprof, time\nwith polyprof.section('work'):\n"
                                      "    time.sleep(0.02)\nprint('PROGRAM RAN')\n")
    return site


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return _site(tmp_path, *ENTRY_POINTS)


def _polyprof(tmp_path: Path, site: Path, *args: str, limit: str = "1", timeout: float = 90,
              ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]),
               POLYPROF_PROBE_TIMEOUT=limit, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "polyprof", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _errors(path: Path) -> dict[str, str]:
    return {e["plugin"]: e["error"] for e in polyprof.load(path).metadata["plugin_errors"]}


def test_a_plugin_whose_probe_hangs_is_reported_and_nothing_waits_for_it(tmp_path, site):
    """Before: `polyprof plugins`, a default `polyprof run` and the kit of another plugin
    each hung for ever, printing nothing (the probe had no time limit)."""
    t0 = time.monotonic()
    r = _polyprof(tmp_path, site, "plugins")
    assert r.returncode == 0, r.stderr
    lines = {ln.split("│")[1].strip(): ln for ln in r.stdout.splitlines() if ln.count("│") > 4}
    assert "its availability check did not return within 1 s" in lines["prb-hangcheck"]
    assert "importing it did not return within 1 s" in lines["prb-hangimport"]
    assert "cannot import: prb driver bindings missing" in lines["prb-badimport"]
    assert "yes" in lines["host"] and "yes" in lines["prb-printer"]

    r = _polyprof(tmp_path, site, "run", "--no-summary", "-o", "t.polyprof", "prog.py")
    assert r.returncode == 0 and r.stdout == "PROGRAM RAN\n", r.stderr
    errors = _errors(tmp_path / "t.polyprof")
    assert errors["prb-hangcheck"] == ("not available: its availability check did not return within 1 s "
                                       "(POLYPROF_PROBE_TIMEOUT sets the limit)")
    assert errors["prb-hangimport"].startswith("not available: importing it did not return within 1 s")
    plugins = polyprof.load(tmp_path / "t.polyprof").metadata["plugins"]
    assert plugins["host"] == "ok" and plugins["prb-hangcheck"].startswith("unavailable: its availability")
    assert "prb-printer" not in plugins  # not a default plugin: a default run does not ask it

    # the kit checks another installed plugin without asking this one; this one fails `load`
    r = _polyprof(tmp_path, site, "plugin", "check", "prb-printer", "--json", limit="60")
    assert json.loads(r.stdout)["clauses"][0] == {"id": "load", "title": registry_load_title(), "status": "pass",
                                                   "reason": "prb-printer: prb_polyprof.Printer, devices PRB"}
    r = _polyprof(tmp_path, site, "plugin", "check", "prb-hangcheck")
    assert r.returncode == 1
    assert "polyprof plugin check: prb-hangcheck did not load" in r.stdout
    assert "its availability check did not return within 1 s" in r.stdout
    assert time.monotonic() - t0 < 80


def registry_load_title() -> str:
    from polyprof.collect.conformance import CLAUSES

    return dict(CLAUSES)["load"]


def test_a_plugin_that_cannot_be_imported_is_reported_by_a_default_run(tmp_path):
    """Before: a default run dropped it silently (neither metadata["plugins"] nor
    plugin_errors), while `--plugins host,NAME` reported it and `--add-plugin NAME`
    stopped the run with exit status 1. Now all three record it and the program runs;
    the summary has its line."""
    site = _site(tmp_path, "prb-badimport", "prb-printer")
    r = _polyprof(tmp_path, site, "run", "-o", "d.polyprof", "prog.py")
    assert r.returncode == 0 and "PROGRAM RAN" in r.stdout, r.stderr
    want = "not available: cannot import: prb driver bindings missing"
    assert _errors(tmp_path / "d.polyprof")["prb-badimport"] == want
    assert f"plugin prb-badimport failed in load: {want}" in r.stdout  # the run's summary
    assert r.stderr.count("prb-badimport") == 1  # one warning as the session starts
    for args in (["--add-plugin", "prb-badimport"], ["--plugins", "host,prb-badimport"]):
        r = _polyprof(tmp_path, site, "run", "--no-summary", "-o", "n.polyprof", *args, "prog.py")
        assert r.returncode == 0 and r.stdout == "PROGRAM RAN\n", (args, r.stderr)
        assert _errors(tmp_path / "n.polyprof")["prb-badimport"] == want, args
        meta = polyprof.load(tmp_path / "n.polyprof").metadata["plugins"]
        assert meta["prb-badimport"] == "unavailable: cannot import: prb driver bindings missing", args
    # a target that cannot be imported still stops the run before the program starts
    r = _polyprof(tmp_path, site, "run", "--no-summary", "-o", "x.polyprof", "--add-plugin", "prb_polyprof:Nope",
                  "prog.py")
    assert r.returncode == 1 and "PROGRAM RAN" not in r.stdout and "prb_polyprof:Nope" in r.stderr


def test_the_kits_json_is_json_when_the_plugin_prints(tmp_path):
    """Before: the plugin's prints came first on stdout and json.load failed; the prints
    go to stderr now, and the program_state clause still says the plugin printed."""
    site = _site(tmp_path, "prb-printer")
    r = _polyprof(tmp_path, site, "plugin", "check", "prb_polyprof:Printer", "--json")
    doc = json.loads(r.stdout)
    state = next(c for c in doc["clauses"] if c["id"] == "program_state")
    assert state["status"] == "fail" and "printed" in state["reason"] and "PRINTED BY THE PLUGIN" in state["reason"]
    assert "PRINTED BY THE PLUGIN" in r.stderr and "WRITTEN TO FD 1 BY THE PLUGIN" in r.stderr
    assert r.returncode == 1


def test_a_later_discovery_does_not_wait_again_and_the_kit_asks_only_its_target(monkeypatch, tmp_path):
    """In one process: the probe that overran is answered at once by the next discovery
    (its hung thread holds the module), and resolve_factory (the kit, --add-plugin)
    loads only the plugin it names."""
    monkeypatch.syspath_prepend(str(_site(tmp_path, "prb-hangcheck", "prb-printer")))
    monkeypatch.setenv("POLYPROF_PROBE_TIMEOUT", "0.5")
    monkeypatch.setenv("PRB_HANG_S", "8")  # before, discovery waited for it: 8 s, not for ever
    monkeypatch.setattr(registry, "_STUCK", {}, raising=False)
    import prb_polyprof

    try:
        t0 = time.monotonic()
        found = registry.discover()
        first = time.monotonic() - t0
        assert found["prb-hangcheck"].failed and found["prb-hangcheck"].factory is None
        assert 0.5 <= first < 5 and found["host"].availability.ok
        t0 = time.monotonic()
        again = registry.discover(session=True)
        assert time.monotonic() - t0 < 0.4 and again["prb-hangcheck"].failed
        monkeypatch.setenv("POLYPROF_PROBE_TIMEOUT", "60")
        t0 = time.monotonic()
        assert registry.resolve_factory("prb-printer") is prb_polyprof.Printer
        assert time.monotonic() - t0 < 5
        prb_polyprof.GATE.set()  # the check returns: asked again, it answers
        for _ in range(100):
            if registry.discover()["prb-hangcheck"].availability.ok:
                break
            time.sleep(0.05)
        assert registry.discover()["prb-hangcheck"].factory is prb_polyprof.HangCheck
    finally:
        prb_polyprof.GATE.set()
        for name in [m for m in sys.modules if m.startswith("prb_polyprof")]:
            monkeypatch.delitem(sys.modules, name)


class _Ticker(Plugin):
    """Records a tick every 5 ms from its own thread until stopped."""

    name = "ticker"

    def _start(self, ctx):
        self.ticks: list[int] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.halt.wait(0.005):
            self.ticks.append(time.perf_counter_ns())

    def _stop(self):
        self.halt.set()
        self.thread.join()

    def _collect(self):
        b = TraceBuilder()
        track = b.track(b.plane("/device:TICK:0", "device"), "ticks", "stream", tid=0)
        n = len(self.ticks)
        b.events(track, np.array(["tick"] * n, object), np.array(self.ticks, np.int64), np.full(n, 1000, np.int64),
                 "kernel")
        return b.build()


class _HangStop(Plugin):
    name = "hangstop"

    def __init__(self, gate: threading.Event):
        super().__init__()
        self.gate = gate

    def _start(self, ctx):
        pass

    def _stop(self):
        self.gate.wait()

    def _collect(self):
        return TraceBuilder().build()


def test_a_stop_that_hangs_does_not_keep_the_other_plugins_recording():
    """The hanging plugin is stopped first (the session stops in reverse order). Before:
    the ticker waited its turn, ticking through the hanging stop's whole limit, and the
    trace's span grew by it (a 0.6 s program gave a 10.4 s trace). Now every plugin stops
    at once and the session ends when the last stop that returned did."""
    gate = threading.Event()
    try:
        s = Session(["host", _Ticker(), _HangStop(gate)], call_timeout=1.0)
        s.start()
        time.sleep(0.05)
        asked = time.perf_counter_ns()
        trace = s.stop()
        waited = (time.perf_counter_ns() - asked) / 1e9
    finally:
        gate.set()
    assert waited >= 1.0  # the hanging stop was waited for, up to its limit
    assert trace.metadata["plugins"] == {"host": "ok", "ticker": "ok", "hangstop": "failed"}
    assert [e["phase"] for e in trace.metadata["plugin_errors"]] == ["stop"]
    ticks = trace.to_pandas().query("name == 'tick'")
    assert len(ticks) >= 3
    assert int(ticks.start_ns.max()) - asked < 300_000_000  # no ticks through the hanging stop's second
    session = trace.metadata["session"]
    assert session["stop_ns"] - asked < 300_000_000


def test_the_probe_limit_is_read_as_the_other_limits_are(monkeypatch):
    monkeypatch.setenv("POLYPROF_PROBE_TIMEOUT", "2.5")
    assert registry.probe_limit() == 2.5
    monkeypatch.setenv("POLYPROF_PROBE_TIMEOUT", "soon")
    with pytest.raises(polyprof.PolyprofError, match="POLYPROF_PROBE_TIMEOUT='soon': expected seconds"):
        registry.discover()
