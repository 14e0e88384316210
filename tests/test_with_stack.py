"""Issue 34, item 4: a program's own ``torch.profiler.profile(with_stack=True)`` lists the
same rows, counts and stacks under polyprof (``polyprof run`` and ``with
polyprof.profile():``) as under plain python, and no polyprof thread; and the parts
that make it so (lowlevel/unseen.py): profile functions do not see a Quiet call,
a Ticker thread holds no thread state while it waits, the script run by
``polyprof run`` is the bottom of its stack.

Self times are compared loosely here (a machine shared by several test processes);
bench/with_stack.py measures them (docs/benchmarks.md, "with_stack under polyprof").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from polyprof.lowlevel import unseen

SRC = Path(__file__).resolve().parents[1] / "src"
compiled = pytest.mark.skipif(unseen.IMPLEMENTATION != "c", reason="the compiled lowlevel._unseen is not built")

#: the model and data both programs train
MODEL = r"""
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 8)
"""

#: a small training loop (optimizer steps: polyprof's step hook runs in them) profiled
#: by the program itself, after a warm-up profile (torch imports modules during its
#: first one); the sampler and the journal wake every few ms meanwhile
PROGRAM = r"""
import contextlib, json, os, sys, threading
import torch
"""+MODEL+r"""
def step():
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()

def measure():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(30):
            step()
    return {"rows": {e.key: [e.count, e.self_cpu_time_total] for e in prof.key_averages()},
            "stacks": sorted({(e.key, tuple(e.stack)) for e in prof.key_averages(group_by_stack_n=5)}),
            "threads": sorted({e.thread for e in prof.events()}),
            "python_threads": sorted(t.name for t in threading.enumerate())}

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True):
    step()

def session(mode):
    if mode == "plain":
        return contextlib.nullcontext()
    import polyprof  # in-process: the same program inside `with polyprof.profile():`
    options = {"host": {"sample_interval_s": 0.002, "journal_interval_s": 0.01}}
    return polyprof.profile(output=sys.argv[1], options=options)

out = {}
for mode in ["plain", "inproc"][:len(sys.argv)]:
    with session(mode):
        out[mode] = measure()  # one line: torch lists the frame of <module> by it
print(json.dumps(out))
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _rows(m: dict) -> dict[str, list[float]]:
    """Rows by name without object addresses; without torch's own dangling row (a module
    imported while it profiled: its name is freed memory, ``file(0): <anything>``, with
    or without polyprof)."""
    return {re.sub(r" at 0x[0-9a-f]+", "", k): v for k, v in m["rows"].items() if "(0): " not in k}


def _stacks(m: dict) -> set[tuple[str, tuple[str, ...]]]:
    strip = lambda s: re.sub(r" at 0x[0-9a-f]+", "", s)  # noqa: E731
    return {(strip(k), tuple(strip(f) for f in st)) for k, st in m["stacks"] if "(0): " not in k}


def _same(plain: dict, under: dict, what: str) -> None:
    a, b = _rows(plain), _rows(under)
    assert {k: v[0] for k, v in b.items()} == {k: v[0] for k, v in a.items()}, what  # names and counts
    assert _stacks(under) == _stacks(plain), what
    assert under["threads"] == plain["threads"] == [1], what  # torch's thread numbers: the main one only
    assert not [t for t in under["python_threads"] if t.startswith("polyprof")], under["python_threads"]
    # self times: loosely (bench/with_stack.py measures them); polyprof's waits on its
    # threads used to add hundreds of ms here, and its step hook its own rows
    total_a, total_b = sum(v[1] for v in a.values()), sum(v[1] for v in b.values())
    assert total_b < 3 * total_a + 20_000, (what, total_a, total_b)


@compiled
def test_a_programs_own_with_stack_profile_is_the_same_under_polyprof(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    inproc = subprocess.run([sys.executable, str(script), str(tmp_path / "in.polyprof")], capture_output=True,
                            text=True, env=_env(), timeout=300, cwd=tmp_path)
    assert inproc.returncode == 0, inproc.stderr
    run = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(tmp_path / "r.polyprof"),
                          "--duration", "600", "--plugin-options", '{"host": {"sample_interval_s": 0.002, "journal_interval_s": 0.01}}',
                          str(script)], capture_output=True, text=True, env=_env(), timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    a = json.loads(inproc.stdout.strip().splitlines()[-1])
    b = json.loads(run.stdout.strip().splitlines()[-1])
    rows = _rows(a["plain"])
    assert any(k.startswith("train.py(") and k.endswith("): step") for k in rows)  # Python rows are there
    assert rows["aten::linear"][0] == 60 and any(k.startswith("torch/optim/") for k in rows)
    _same(a["plain"], a["inproc"], "with polyprof.profile()")
    _same(a["plain"], b["plain"], "polyprof run")
    assert (tmp_path / "r.polyprof").is_file() and (tmp_path / "in.polyprof").is_file()


@compiled
def test_the_script_of_polyprof_run_is_the_bottom_of_its_stack(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("import sys, traceback\n"
                      "def f():\n"
                      "    return [fr.name for fr in traceback.extract_stack()]\n"
                      "print(f(), sys._getframe().f_back, __builtins__ is not None)\n")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    run = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-o",
                          str(tmp_path / "s.polyprof"), str(script)], capture_output=True, text=True, env=_env(),
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == plain.stdout == "['<module>', 'f'] None True\n"


@compiled
def test_a_quiet_call_is_not_seen_by_the_profile_function() -> None:
    seen: list[tuple[str, str]] = []

    def profile(frame, event, arg):  # noqa: ANN001
        seen.append((event, frame.f_code.co_name if event in ("call", "return") else getattr(arg, "__name__", "")))

    def hidden(x: int) -> int:
        return len([x])

    def shown(x: int) -> int:
        return x + 1

    q = unseen.quiet(hidden)
    both = unseen.quiet(hidden, then=shown)
    sys.setprofile(profile)
    try:
        r1, r2 = q(1), both(2)
    finally:
        sys.setprofile(None)
    assert (r1, r2) == (1, 3)
    names = {n for _, n in seen}
    assert "hidden" not in names and "len" not in names  # neither the call nor what it did
    assert ("call", "shown") in seen and ("return", "shown") in seen  # `then` is seen
    assert sys.getprofile() is None


@compiled
def test_a_ticker_holds_no_thread_state_while_it_waits() -> None:
    from polyprof.collect import background

    calls: list[int] = []
    states: list[int] = []

    def tick() -> float | None:
        calls.append(threading.get_ident())
        states.append(len(sys._current_frames()))
        return 0.005 if len(calls) < 5 else None

    before = len(sys._current_frames())
    names = sorted(t.name for t in threading.enumerate())
    t = background.start(tick, 0.0, "polyprof-test")
    deadline = time.monotonic() + 10
    while len(calls) < 5 and time.monotonic() < deadline:
        assert len(sys._current_frames()) == before  # never seen from here, even while it ticks
        time.sleep(0.001)
    assert background.stop(t, 5.0)
    assert len(calls) == 5 and states == [before + 1] * 5  # a thread state only during its call
    assert sorted(t.name for t in threading.enumerate()) == names
    assert len(sys._current_frames()) == before


@compiled
def test_a_gated_call_waits_for_a_ticker_call_to_end() -> None:
    from polyprof.collect import background

    inside = threading.Event()
    order: list[str] = []

    def tick() -> float | None:
        inside.set()
        time.sleep(0.05)
        order.append("tick")
        return None

    t = background.start(tick, 0.0, "polyprof-test")
    assert inside.wait(10)
    unseen.gated(lambda: order.append("gated"))()
    assert order == ["tick", "gated"]
    assert background.stop(t, 5.0)


@compiled
def test_a_thread_started_in_a_session_has_no_polyprof_frame_and_is_named() -> None:
    import traceback

    import polyprof

    stack: list[str] = []

    def work() -> None:
        with polyprof.section("in thread"):
            stack.extend(f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_stack())

    with polyprof.profile(plugins=["host"]) as s:
        t = threading.Thread(target=work, name="short-lived")
        t.start()
        t.join()
    assert stack == ["threading.py:_bootstrap", "threading.py:_bootstrap_inner", "threading.py:run",
                     "test_with_stack.py:work"]
    assert s.trace is not None and "short-lived" in {tr.name for tr in s.trace.tracks}


@compiled
def test_a_session_ending_inside_the_programs_own_profiler_leaves_it_alone() -> None:
    """The program's profiler took torch over from the session's own recording (which
    is kept up to there); at the session's end polyprof neither stops it nor writes its
    clock markers into it."""
    torch = pytest.importorskip("torch")
    import polyprof

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with polyprof.profile(plugins=["torch"]) as s:
        torch.ones(3).sum()
        prof.start()  # the program's own: the session's recording ends here
        torch.ones(3).sum()
    torch.ones(4).mul(2)  # still recorded by the program's profiler
    prof.stop()
    names = {e.key for e in prof.key_averages()}
    assert "aten::mul" in names and "polyprof::clock_sync" not in names
    assert s.trace is not None
    assert s.trace.names().tolist().count("aten::ones") == 1  # the one before the program's start
    assert any("started its own torch.profiler" in w for w in s.trace.metadata["warnings"])


#: the drop-in against torch's own profiler, with a schedule of two cycles and
#: prof.step() (each cycle's clock markers, polyprof.step() in each step), after a
#: warm-up profile of each kind (first-time imports)
DROP_IN = r"""
import json, sys, threading
import torch
import polyprof.torch
"""+MODEL+r"""CPU = [torch.profiler.ProfilerActivity.CPU]
OPTS = {"host": {"sample_interval_s": 0.002, "journal_interval_s": 0.01}}

def step():
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()

def make(kind, **kw):
    if kind == "plain":
        return torch.profiler.profile(activities=CPU, with_stack=True, **kw)
    return polyprof.torch.profile(activities=CPU, with_stack=True, output=sys.argv[1], polyprof_options=OPTS, **kw)

def measure(kind):
    cycles = []
    prof = make(kind, schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
                on_trace_ready=lambda p: cycles.append(
                    {"rows": {e.key: [e.count, e.self_cpu_time_total] for e in p.key_averages()},
                     "stacks": sorted({(e.key, tuple(e.stack)) for e in p.key_averages(group_by_stack_n=5)}),
                     "threads": sorted({e.thread for e in p.events()}),
                     "python_threads": sorted(t.name for t in threading.enumerate())}))
    with prof:
        for _ in range(12):
            step()
            prof.step()
    return {"cycles": cycles, "trace": None if kind == "plain" else prof.trace.n_events}

for kind in ["plain", "dropin"]:
    with make(kind):
        step()
out = {}
for kind in ["plain", "dropin"]:
    out[kind] = measure(kind)  # one line: torch lists the frame of <module> by it
print(json.dumps(out))
"""


@compiled
def test_the_drop_in_with_stack_lists_what_torchs_own_profiler_lists(tmp_path: Path) -> None:
    """``polyprof.torch.profile(with_stack=True)``: its session, clock markers and
    ``polyprof.step()`` run unseen by torch's tracer, and its tables leave out the markers."""
    pytest.importorskip("torch")
    script = tmp_path / "dropin.py"
    script.write_text(DROP_IN)
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "d.polyprof")], capture_output=True,
                       text=True, env=_env(), timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    plain, dropin = out["plain"]["cycles"], out["dropin"]["cycles"]
    assert len(plain) == len(dropin) == 2
    for i, (a, b) in enumerate(zip(plain, dropin)):
        rows = _rows(a)
        assert rows["aten::linear"][0] == 6 and any(k.startswith("dropin.py(") for k in rows)
        assert any(k.startswith("torch/profiler/profiler.py(") and k.endswith("): step") for k in rows)
        assert not [k for k in _rows(b) if "polyprof" in k], f"cycle {i}"
        _same(a, b, f"drop-in cycle {i}")
    assert out["dropin"]["trace"] > 0 and (tmp_path / "d.polyprof").is_file()  # the session recorded


@compiled
def test_a_quiet_call_undoes_unseen_when_then_raises() -> None:
    seen: list[str] = []
    undone: list[int] = []

    def profile(frame, event, arg):  # noqa: ANN001
        if event == "call":
            seen.append(frame.f_code.co_name)

    def before(x: int) -> None:
        pass

    def boom(x: int) -> None:
        raise ValueError(f"boom {x}")

    def undo(x: int) -> None:
        undone.append(x)

    q = unseen.quiet(before, then=boom, failed=undo)
    sys.setprofile(profile)
    try:
        with pytest.raises(ValueError, match="boom 7"):
            q(7)
    finally:
        sys.setprofile(None)
    assert undone == [7] and "boom" in seen and "undo" not in seen and "before" not in seen
    assert unseen.quiet(before, then=lambda x: x + 1, failed=undo)(1) == 2 and undone == [7]


#: a with_stack program that opens polyprof sections (listed as any library's calls)
SECTIONS = r"""
import json, sys, threading
import torch
import polyprof
torch.set_num_threads(1)
a = torch.ones(64, 64)

def work():
    with polyprof.section("fwd"):
        a.mm(a).sum()

def measure():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(5):
            work()
    return {"rows": {e.key: [e.count, e.self_cpu_time_total] for e in prof.key_averages()},
            "stacks": sorted({(e.key, tuple(e.stack)) for e in prof.key_averages(group_by_stack_n=5)}),
            "threads": sorted({e.thread for e in prof.events()}),
            "python_threads": sorted(t.name for t in threading.enumerate()),
            "annotations": sorted({e.key for e in prof.key_averages() if e.is_user_annotation})}

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True):
    work()
print(json.dumps(measure()))
"""


@compiled
def test_sections_mirrored_into_the_programs_profile_unless_turned_off(tmp_path: Path) -> None:
    """Under ``polyprof run`` a program's own torch profile gets its polyprof sections as
    ``user_annotation`` rows (what shows them in its TensorBoard traces), and nothing
    else; ``{"torch": {"mirror_sections": false}}`` leaves its tables as under python."""
    pytest.importorskip("torch")
    script = tmp_path / "sec.py"
    script.write_text(SECTIONS)
    opts = {"host": {"sample_interval_s": 0.002, "journal_interval_s": 0.01}}

    def run(*cmd: str) -> dict:
        p = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=_env(), timeout=300,
                           cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    def under(options: dict) -> dict:
        return run("-m", "polyprof", "run", "--no-summary", "-o", str(tmp_path / "r.polyprof"),
                   "--plugin-options", json.dumps(options), str(script))

    plain = run(str(script))
    mirrored = under(opts)
    off = under({**opts, "torch": {"mirror_sections": False}})
    assert plain["annotations"] == off["annotations"] == [] and mirrored["annotations"] == ["fwd"]
    _same(plain, off, "mirror_sections off")
    rows = {k: v[0] for k, v in _rows(mirrored).items()}
    assert rows.pop("fwd") == 5  # one row per section name, one call per section
    assert rows == {k: v[0] for k, v in _rows(plain).items()}
    assert {st for st in _stacks(mirrored) if st[0] != "fwd"} == _stacks(plain)  # no polyprof frame
    assert mirrored["threads"] == plain["threads"] == [1]


def test_the_plugins_own_with_stack_is_read_in_memory_without_warnings(tmp_path: Path) -> None:
    """The plugin asked torch for ``trace_only`` (no per-op Python events built at stop)
    with ``with_stack`` too: torch warned that it disables it, and the activities' names
    of a recording with stacks came out undecodable ("could not be read in memory
    (UnicodeDecodeError...); reading its JSON export instead", every time)."""
    pytest.importorskip("torch")
    script = tmp_path / "stacks.py"
    script.write_text("import json, torch, polyprof\n"
                      "with polyprof.profile(plugins=['torch'], options={'torch': {'with_stack': True}}) as s:\n"
                      "    x = torch.randn(16, 16)\n"
                      "    for i in range(3):\n"
                      "        torch.mm(x, x)\n"
                      "names = {s.trace.strings[i] for i in set(s.trace.events['name'].tolist())}\n"
                      "print(json.dumps([s.trace.metadata.get('warnings', []), 'aten::mm' in names]))\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    warned, has_mm = json.loads(p.stdout.strip().splitlines()[-1])
    assert warned == [] and has_mm, warned
    assert "trace_only" not in p.stderr and "could not be read" not in p.stderr, p.stderr[-3000:]
