from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
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
# A job started in the background of a non-interactive shell (`cmd &` in a CI script)
# inherits SIGINT ignored, and so would every program the tests start: plain python then
# ignores Ctrl-C too, and the signal tests (which model a program run from a terminal)
# could not tell polyprof's behaviour from python's. Python's own handler here means
# the children start with the default disposition (a caught signal resets at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture
def mount_tmpfs(tmp_path: Path):
    """Mounts a small tmpfs, a real full disk: ``mount_tmpfs("1m")`` (mount's ``size=``) is
    a new folder under tmp_path, unmounted when the test ends. Needs root and mount(8):
    the test is skipped with the reason otherwise."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
        mnt.mkdir()
        if shutil.which("mount") is None or os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root and mount(8)")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    try:
        yield mount
    finally:
        for mnt in mounted:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


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


@pytest.fixture(params=[True, False], ids=["tokenizer", "msgspec"])
def kineto_compiled(request, monkeypatch) -> bool:
    """Run a test once with each path of the Kineto reader: the C tokenizer (skipped where
    ``_tokens`` is not built) and msgspec's decode, which the fallback takes; the flag."""
    from polyprof.formats.kineto import tokenized

    if request.param and tokenized.IMPLEMENTATION != "c":
        pytest.skip("the _tokens extension is not built")
    if not request.param:
        monkeypatch.setattr(tokenized, "_tokens", None)
    return bool(request.param)


@pytest.fixture
def rec(section_impl):
    """A bare recorder made active (no session), so tests see the raw record tuples;
    with each section implementation in turn (the section_impl fixture)."""
    from polyprof.collect import recorder

    r = recorder.Recorder()
    recorder.activate(r)
    try:
        yield r
    finally:
        recorder.activate(None)


# ------------------------------------------------------------------ OpenCL
# Tests marked `opencl` need a device that compiles kernels. Some drivers list a device
# that cannot (PoCL 3.0 from the pyopencl wheel on CPUs its LLVM does not know, such as
# AMD Zen 5: "unknown target CPU 'generic'"). One probe, run only when such tests were
# collected, picks the first device that can and names it in PYOPENCL_CTX (read by
# pyopencl.create_some_context here and in subprocesses); when none can, the tests are
# skipped and the summary says why in one line.
_OPENCL_SKIP_KEY = pytest.StashKey[str]()


def _opencl_problem() -> str | None:
    try:
        import pyopencl  # noqa: F401
    except Exception as e:
        return f"pyopencl is not usable ({e})"
    from polyprof.plugins.opencl import probe

    try:
        dev, problems = probe.first_compiling()
    except Exception as e:  # no platform at all raises in some ICD loaders
        return f"no OpenCL platform ({e})"
    if dev is None:
        return ("no OpenCL device here can compile kernels (" + "; ".join(problems) + ")"
                if problems else "no OpenCL device found")
    os.environ.setdefault("PYOPENCL_CTX", probe.context_spec(dev))
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [it for it in items if it.get_closest_marker("opencl")]
    if not marked:
        return
    why = _opencl_problem()
    if why is None:
        return
    config.stash[_OPENCL_SKIP_KEY] = f"OpenCL tests skipped: {why}"
    for it in marked:
        it.add_marker(pytest.mark.skip(reason=f"OpenCL: {why}"))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    line = config.stash.get(_OPENCL_SKIP_KEY, None)
    if line:
        terminalreporter.write_line(line + " (scripts/test.sh installs Debian's pocl-opencl-icd, "
                                    "which can; see README)", yellow=True)
