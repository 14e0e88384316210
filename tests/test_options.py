"""The session's options are declared once (collect/options.py) and every entry reads
them: ``polyprof.profile`` as a context manager and as a decorator, ``polyprof run``'s
flags, and the ``POLYPROF_*`` environment variables. Each test below gives *every*
option through one entry and checks each one's effect on the trace it made."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import build_parser
from polyprof.collect import options as opts
from polyprof.errors import SessionError

HERE = Path(__file__).parent
SRC = HERE.parent / "src"

#: six steps of the same work; the schedule below keeps steps 2 and 3 only
WORK = ("import time, polyprof\n"
        "for i in range(6):\n"
        "    with polyprof.section('work'):\n"
        "        time.sleep(0.002)\n"
        "    polyprof.step()\n")
PLUGINS = ["host", "options_probe:Quick", "options_probe:SlowStop", "options_probe:SlowCollect"]
SCHEDULE = "skip_first=2,wait=0,warmup=0,active=2,repeat=1"
PLUGIN_OPTIONS = {"host": {"sample_interval_s": 0}}  # no process samples: no counters


@pytest.fixture(autouse=True)
def _probe_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    for name in opts.NAMES:
        monkeypatch.delenv(opts.env_name(name), raising=False)


def _output(tmp_path: Path) -> tuple[Path, Path]:
    """A symlink as the output (written through only with follow_symlinks) and its target."""
    real = tmp_path / "real.polyprof"
    real.write_bytes(b"")
    link = tmp_path / "out" / "link.polyprof"
    link.parent.mkdir()
    link.symlink_to(real)
    return link, real


def _given(link: Path) -> dict:
    """Every option, with a value other than its default."""
    given = {"plugins": PLUGINS, "output": link, "memory": True, "schedule": SCHEDULE, "options": PLUGIN_OPTIONS,
             "collect_timeout": 0.4, "call_timeout": 0.3, "record_argv": True, "follow_symlinks": True}
    # a new option must be added here (and checked below); the time window (delay,
    # duration) excludes a schedule, so it goes through every entry in test_windows.py, as
    # does max_host_events (it drops what the schedule keeps)
    assert set(given) | {"delay", "duration", "max_host_events"} == set(opts.NAMES)
    return given


def _flags(link: Path) -> list[str]:
    return ["--plugins", ",".join(PLUGINS), "-o", str(link), "--memory", "--schedule", SCHEDULE,
            "--plugin-options", json.dumps(PLUGIN_OPTIONS), "--collect-timeout", "0.4", "--call-timeout", "0.3",
            "--record-argv", "--follow-symlinks"]


def _environ(link: Path) -> dict[str, str]:
    return {"POLYPROF_PLUGINS": ",".join(PLUGINS), "POLYPROF_OUTPUT": str(link), "POLYPROF_MEMORY": "1",
            "POLYPROF_SCHEDULE": SCHEDULE, "POLYPROF_PLUGIN_OPTIONS": json.dumps(PLUGIN_OPTIONS),
            "POLYPROF_COLLECT_TIMEOUT": "0.4", "POLYPROF_CALL_TIMEOUT": "0.3", "POLYPROF_RECORD_ARGV": "yes",
            "POLYPROF_FOLLOW_SYMLINKS": "true"}


def _check(t: polyprof.Trace, link: Path, real: Path, argv: list[str]) -> None:
    """The effect of each option given by :func:`_given`."""
    meta = t.metadata
    # plugins: these four and no other (no default device plugin)
    assert set(meta["plugins"]) == {"host", "probe-quick", "probe-slow-stop", "probe-slow-collect"}
    errors = {e["plugin"]: e["error"] for e in meta["plugin_errors"]}
    # call_timeout / collect_timeout: the slow plugins were held to 0.3 s and 0.4 s
    assert "did not return within 0.3 s" in errors["probe-slow-stop"], errors
    assert "timed out after 0.4 s" in errors["probe-slow-collect"], errors
    names = t.names()
    # memory: every plugin was given memory=True
    assert "probe-quick memory=True" in set(names)
    # schedule: only steps 2 and 3 kept
    assert meta["schedule"]["recorded_steps"] == [2, 3]
    assert int((names == "work").sum()) == 2
    # options: the host plugin sampled nothing (sample_interval_s=0)
    assert len(t.counters["ts_ns"]) == 0
    # record_argv: the arguments, not placeholders (polyprof run's are its own command's)
    assert list(meta["session"]["argv"])[-len(argv):] == argv
    # output + follow_symlinks: written through the link
    assert link.is_symlink()
    back = polyprof.load(real)
    assert back.n_events == t.n_events and back.metadata["schedule"]["recorded_steps"] == [2, 3]


def _work() -> None:
    exec(compile(WORK, "work", "exec"), {})


def test_every_option_is_declared_once_and_reaches_every_entry():
    """profile()'s keywords, run's flags and the variables are the dataclass's fields."""
    run = build_parser("run")._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    dests = {a.dest for a in run._actions}
    assert set(opts.NAMES) <= dests
    for f in dataclasses.fields(opts.SessionOptions):
        assert opts.env_name(f.name) in (opts.__doc__ or "") and f.metadata["flags"][-1] in (opts.__doc__ or "")
    with pytest.raises(SessionError, match="unknown session option 'memroy'"):
        polyprof.profile(memroy=True)
    with pytest.raises(SessionError, match=r"\$POLYPROF_MEMORY='maybe'"):
        opts.make({"POLYPROF_MEMORY": "maybe"})
    # profile()'s signature (help(), notebooks) is the dataclass's fields
    import inspect

    sig = inspect.signature(polyprof.profile)
    assert list(sig.parameters) == ["plugins", *(n for n in opts.NAMES if n != "plugins")]
    assert sig.parameters["memory"].default is False and sig.parameters["collect_timeout"].default == 30.0
    # nothing given, nothing in the environment: the declared defaults
    assert polyprof.profile().settings == opts.SessionOptions()
    # given wins over the environment, which wins over the default
    s = opts.make({"POLYPROF_COLLECT_TIMEOUT": "5", "POLYPROF_CALL_TIMEOUT": "7"}, collect_timeout=2)
    assert (s.collect_timeout, s.call_timeout, s.memory) == (2.0, 7.0, False)


def test_context_manager(tmp_path):
    link, real = _output(tmp_path)
    with polyprof.profile(**_given(link)) as s:
        _work()
    assert s.trace is not None
    _check(s.trace, link, real, list(sys.argv))


def test_decorator(tmp_path):
    """The decorator used to drop memory and schedule (and plugin objects' options)."""
    link, real = _output(tmp_path)

    @polyprof.profile(**_given(link))
    def work() -> None:
        _work()

    work()
    _check(work.trace, link, real, list(sys.argv))


def test_decorator_records_torch_memory_and_follows_the_schedule():
    torch = pytest.importorskip("torch")

    @polyprof.profile(["host", "torch"], memory=True, schedule=polyprof.schedule(skip_first=1, active=2, repeat=1))
    def train() -> None:
        m = torch.nn.Linear(16, 16)
        x = torch.randn(4, 16)
        for _ in range(5):
            with polyprof.section("fwd"):
                m(x).sum().backward()
            polyprof.step()

    train()
    t = train.trace
    assert t.metadata["schedule"]["recorded_steps"] == [1, 2]
    assert int((t.names() == "fwd").sum()) == 2
    from polyprof.analyze.frames import column
    from polyprof.analyze.memory import memory_peak

    peak = memory_peak(t)
    assert len(peak) == 1 and column(peak, "allocator")[0] == "torch" and column(peak, "peak_bytes")[0] > 0


def test_environment(tmp_path, monkeypatch):
    link, real = _output(tmp_path)
    for k, v in _environ(link).items():
        monkeypatch.setenv(k, v)
    with polyprof.profile() as s:
        _work()
    assert s.trace is not None
    _check(s.trace, link, real, list(sys.argv))


def _run(tmp_path: Path, args: list[str], env: dict[str, str]) -> None:
    script = tmp_path / "work.py"
    script.write_text(WORK)
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", *args, str(script), "a1", "--a2"],
                       capture_output=True, text=True, env=full, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


def test_polyprof_run_flags(tmp_path):
    link, real = _output(tmp_path)
    _run(tmp_path, _flags(link), {})
    t = polyprof.load(real)
    _check(t, link, real, [str(tmp_path / "work.py"), "a1", "--a2"])


def test_polyprof_run_environment(tmp_path):
    link, real = _output(tmp_path)
    _run(tmp_path, [], _environ(link))
    t = polyprof.load(real)
    _check(t, link, real, [str(tmp_path / "work.py"), "a1", "--a2"])


def test_flags_win_over_the_environment(tmp_path):
    out = tmp_path / "flag.polyprof"
    _run(tmp_path, ["-o", str(out), "--plugins", "host"],
         {"POLYPROF_OUTPUT": str(tmp_path / "env.polyprof"), "POLYPROF_PLUGINS": "host,options_probe:Quick",
          "POLYPROF_MEMORY": "0"})
    t = polyprof.load(out)
    assert not (tmp_path / "env.polyprof").exists() and set(t.metadata["plugins"]) == {"host"}
    argv = list(t.metadata["session"]["argv"])
    assert len(argv) > 3 and set(argv[1:]) == {"<argument>"}


def test_every_variable_is_named_after_its_flag_and_a_former_name_still_reads(monkeypatch):
    """``--max-events`` was ``POLYPROF_MAX_HOST_EVENTS`` (the field's name), so the
    README's ``POLYPROF_<NAME>`` (``POLYPROF_MAX_EVENTS``) was silently ignored."""
    from dataclasses import fields

    for f in fields(opts.SessionOptions):
        flag = f.metadata["flags"][-1]
        assert opts.env_name(f.name) == "POLYPROF_" + flag.lstrip("-").replace("-", "_").upper(), f.name
    for name in opts.NAMES:
        monkeypatch.delenv(opts.env_name(name), raising=False)
    monkeypatch.setenv("POLYPROF_MAX_HOST_EVENTS", "7")
    assert opts.make().max_host_events == 7
    monkeypatch.setenv("POLYPROF_MAX_EVENTS", "9")  # the flag's name wins
    assert opts.make().max_host_events == 9
