"""collect/importhook.py: a plugin starts once the program has imported its module,
including an import that was already running when the hook was installed.

Before: the hook only wrapped the loader of an import that had not begun (its
``find_spec``), so a session started while another thread imported torch (a capture
arriving during the program's ``import torch``) installed a hook that never fired: the
capture held 0 torch ops and no warning."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from polyprof.collect.importhook import ImportHook, imported, importing

#: a module that signals it began, waits for the test, then fails or finishes
SLOW_MODULE = """
import _pp_gate
_pp_gate.entered.set()
assert _pp_gate.go.wait(30)
if _pp_gate.fail:
    raise ImportError("failed on purpose")
DONE = True
"""


@pytest.fixture
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The name of a module in tmp_path whose import waits for ``gate.go``; the gate."""
    name = f"pp_slow_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(SLOW_MODULE)
    gate = types.SimpleNamespace(entered=threading.Event(), go=threading.Event(), fail=False)
    monkeypatch.setitem(sys.modules, "_pp_gate", gate)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, gate
    gate.go.set()
    sys.modules.pop(name, None)


def _import_in_thread(name: str, box: dict) -> threading.Thread:
    def run() -> None:
        try:
            box["module"] = importlib.import_module(name)
        except ImportError as e:
            box["error"] = e

    t = threading.Thread(target=run, name="importer")
    t.start()
    return t


def _recorder(name: str, calls: list) -> ImportHook:
    def callback() -> None:
        mod = sys.modules.get(name)
        calls.append((threading.current_thread().name, getattr(mod, "DONE", None), importing(mod)))

    return ImportHook(name, callback)


def test_an_import_running_when_the_hook_is_installed_runs_the_callback_at_its_end(slow_module) -> None:
    name, gate = slow_module
    box: dict = {}
    t = _import_in_thread(name, box)
    assert gate.entered.wait(30)
    assert importing(sys.modules[name])
    spec_class = type(sys.modules[name].__spec__)
    calls: list = []
    hook = _recorder(name, calls).install()
    try:
        assert calls == []
        gate.go.set()
        t.join(30)
        # once, on the importing thread, with the module complete and marked so
        assert calls == [("importer", True, False)]
        assert box["module"].DONE is True
        assert type(box["module"].__spec__) is spec_class  # the spec's own class back
        assert hook not in sys.meta_path
    finally:
        hook.remove()


def test_a_running_import_that_fails_leaves_the_hook_for_the_next_import(slow_module) -> None:
    name, gate = slow_module
    box: dict = {}
    t = _import_in_thread(name, box)
    assert gate.entered.wait(30)
    calls: list = []
    hook = _recorder(name, calls).install()
    try:
        gate.fail = True
        gate.go.set()
        t.join(30)
        assert "error" in box and calls == [] and hook in sys.meta_path
        gate.fail = False
        importlib.import_module(name)  # the next import passes through find_spec
        assert calls == [("MainThread", True, False)]
        assert hook not in sys.meta_path
    finally:
        hook.remove()


def test_a_hook_removed_during_the_import_does_nothing(slow_module) -> None:
    name, gate = slow_module
    box: dict = {}
    t = _import_in_thread(name, box)
    assert gate.entered.wait(30)
    spec_class = type(sys.modules[name].__spec__)
    calls: list = []
    hook = _recorder(name, calls).install()
    hook.remove()  # the session stopped before the import ended
    gate.go.set()
    t.join(30)
    assert calls == [] and box["module"].DONE is True
    assert type(box["module"].__spec__) is spec_class


def test_an_import_after_the_hook_runs_the_callback_once_complete(slow_module) -> None:
    name, gate = slow_module
    calls: list = []
    hook = _recorder(name, calls).install()
    try:
        gate.go.set()
        importlib.import_module(name)
        assert calls == [("MainThread", True, False)]  # importing() False: the import had ended
    finally:
        hook.remove()


#: a session started while another thread imports torch: that thread's torch ops after
#: the import are recorded (before: none; the hook waited for an import that had begun)
TORCH_MID_IMPORT = r"""
import sys, threading, time
import polyprof
from polyprof.collect.importhook import importing

def work():
    import torch
    x = torch.randn(64, 64)
    for _ in range(20):
        torch.mm(x, x)

t = threading.Thread(target=work)
t.start()
deadline = time.monotonic() + 120
while not importing(sys.modules.get("torch")):
    assert time.monotonic() < deadline and t.is_alive(), "torch's import was never seen running"
    time.sleep(0.0005)
with polyprof.profile(plugins=["torch"]) as s:
    t.join(300)
names = s.trace.names().astype(str)
print("mm", int((names == "aten::mm").sum()), "warnings", s.trace.metadata.get("warnings"))
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_session_started_during_import_torch_records_the_torch_ops() -> None:
    r = subprocess.run([sys.executable, "-c", TORCH_MID_IMPORT], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("mm 20 "), (r.stdout, r.stderr[-3000:])


def test_a_module_still_importing_is_not_imported(slow_module) -> None:
    """What the jax and OpenCL plugins ask before they act on the program's module
    (``imported``): a module another thread is still importing is not imported yet, so
    the plugin installs its hook, which follows that import to its end; before, they
    asked ``name in sys.modules`` and acted on the half-imported module."""
    name, gate = slow_module
    assert not imported(name)
    box: dict = {}
    t = _import_in_thread(name, box)
    assert gate.entered.wait(30)
    assert name in sys.modules and not imported(name)
    gate.go.set()
    t.join(30)
    assert imported(name) and box["module"].DONE
