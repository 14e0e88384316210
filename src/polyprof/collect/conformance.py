"""The conformance kit: run each clause of the plugin contract (DESIGN.md §4) against
a plugin and say, per clause, whether it holds and why not.

Targets: a native library (``path.so``), a factory (``pkg.module:Factory``) or an
installed plugin's name. Native plugins are driven through the raw C ABI
(:class:`~polyprof.collect.native.NativeHandle`), so the kit sees what the library
itself does, not what polyprof's wrapper would paper over; Python plugins through
their public ``start``/``stop``/``collect``. ``polyprof plugin check TARGET`` prints
the report; :func:`check` returns it.
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, TextIO, TypeVar, cast

import numpy as np

from ..errors import PluginError, PolyprofError
from ..trace.core import Trace
from .clock import now_ns, wall_anchor
from .native import (
    ERR_BUFFER_TOO_SMALL,
    OK,
    NativeCallError,
    NativeHandle,
    NativePlugin,
    code_name,
    xspace_problems,
)
from .plugin import Plugin, SessionContext
from .kit_subjects import (  # noqa: F401 - Limits, ClauseFailed and CallTimeout: the kit's API
    CallTimeout,
    ClauseFailed,
    Limits,
    _NativeSubject,
    _PythonSubject,
    _Subject,
    _subject,
    _Timings,
)
from .remote import PluginCrashed, PluginTimeout, RemoteHandle

log = logging.getLogger("polyprof")

#: (id, what the clause checks), in report order
CLAUSES: list[tuple[str, str]] = [
    ("load", "loads; declares name, version and required functions"),
    ("lifecycle", "start -> stop -> collect works; stop before start is an error"),
    ("double_start", "a second start() without stop() is an error and corrupts nothing"),
    ("collect_without_start", "collect() before start() or before stop() is an error"),
    ("collect_twice", "a second collect() returns the same data or a clear error"),
    ("buffer_too_small", "collect() into a small buffer: ERR_BUFFER_TOO_SMALL + size, no overrun"),
    ("xspace_well_formed", "the XSpace parses and every metadata id it uses is defined"),
    ("stop_race", "stop() while other threads are busy; a second stop() is an error"),
    ("valid_trace", "collect() gives a valid Trace whose times lie inside the session"),
    ("program_state", "start, stop and collect leave the program's directory, environment, stdout, signals"),
    ("time_limits", "start, stop and collect return within their time limits"),
]
NATIVE_ONLY = {"buffer_too_small", "xspace_well_formed"}
PASS, FAIL, NA, NOT_RUN = "pass", "fail", "n/a", "not run"
_GUARD = 4096
_CANARY = 0x5A
_SLACK_NS = 2_000_000  # event times may lie this far outside [start call, stop return]

T = TypeVar("T")
I = TypeVar("I")  # what a subject drives: a native handle, or a Plugin  # noqa: E741
D = TypeVar("D")  # what its collect() returns: XSpace bytes, or a Trace



@dataclass
class ClauseResult:
    id: str
    title: str
    status: str = NOT_RUN
    reason: str = ""


@dataclass
class Report:
    target: str
    kind: str = "?"  # "native" or "python"
    plugin: str = "?"
    results: list[ClauseResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status in (PASS, NA) for r in self.results)

    @property
    def failed(self) -> list[str]:
        return [r.id for r in self.results if r.status == FAIL]

    def result(self, clause: str) -> ClauseResult:
        return next(r for r in self.results if r.id == clause)

    def to_dict(self) -> dict[str, object]:
        return {"target": self.target, "kind": self.kind, "plugin": self.plugin, "ok": self.ok,
                "clauses": [r.__dict__ for r in self.results]}


# ------------------------------------------------------------------ workload
#: what the kit runs while a plugin records, when the plugin's factory is not a Plugin
#: class (a function returning one) and no workload is given
workload = Plugin.conformance_workload


# ------------------------------------------------------------------ helpers
def _expect_error(fn: Callable[[], object], what: str) -> str:
    """Run a call the contract says must fail; the description of how it failed."""
    try:
        fn()
    except CallTimeout:
        raise
    except (PluginCrashed, PluginTimeout) as e:  # a crash is never a refusal
        raise ClauseFailed(f"{what}: {e}") from None
    except NativeCallError as e:
        return f"{what} refused with {code_name(e.code)}" + (f" ({e.detail})" if e.detail else "")
    except PolyprofError as e:
        return f"{what} refused with {type(e).__name__}"
    except Exception as e:
        raise ClauseFailed(f"{what} raised {type(e).__name__}: {e}; expected a polyprof PluginError") from None
    raise ClauseFailed(f"{what} succeeded; the contract says it must return an error")


def _must(fn: Callable[[], T], what: str) -> T:
    try:
        return fn()
    except ClauseFailed:
        raise
    except Exception as e:
        raise ClauseFailed(f"{what} failed: {type(e).__name__}: {e}") from None


class _Run(Generic[I, D]):
    """One kit run against one subject."""

    def __init__(self, subject: _Subject[I, D], limits: Limits, workload_fn: Callable[[float], object]):
        self.s = subject
        self.limits = limits
        self.work = workload_fn

    def session(self, inst: I) -> D:
        """start, workload, stop, collect on a fresh instance; the collected data."""
        _must(lambda: self.s.start(inst), "start()")
        self.work(self.limits.activity_s)
        _must(lambda: self.s.stop(inst), "stop()")
        return _must(lambda: self.s.collect(inst), "collect()")

    def with_instance(self, fn: Callable[[I], str]) -> str:
        inst = _must(self.s.new, "creating an instance")
        abandoned = False
        try:
            return fn(inst)
        except CallTimeout:
            abandoned = True  # its call is still running: never touch it again
            raise
        finally:
            if not abandoned:
                try:
                    self.s.dispose(inst)
                except Exception as e:
                    log.debug("kit: dispose failed: %s", e)

    # -------------------------------------------------------------- clauses
    def lifecycle(self, inst: I) -> str:
        refused = _expect_error(lambda: self.s.stop(inst), "stop() before start()")
        data = self.session(inst)
        trace = _must(lambda: self.s.to_trace(inst, data), "reading what collect() returned")
        return f"{refused}; start/stop/collect gave {trace.n_events} events"

    def double_start(self, inst: I) -> str:
        _must(lambda: self.s.start(inst), "start()")
        refused = _expect_error(lambda: self.s.start(inst), "second start()")
        self.work(self.limits.activity_s / 2)
        _must(lambda: self.s.stop(inst), "stop() after the refused second start()")
        data = _must(lambda: self.s.collect(inst), "collect() after the refused second start()")
        _must(lambda: self.s.to_trace(inst, data), "reading what collect() returned")
        return f"{refused}; stop and collect still work"

    def collect_without_start(self, inst: I) -> str:
        a = _expect_error(lambda: self.s.collect(inst), "collect() before start()")
        _must(lambda: self.s.start(inst), "start()")
        b = _expect_error(lambda: self.s.collect(inst), "collect() before stop()")
        _must(lambda: self.s.stop(inst), "stop()")
        return f"{a}; {b}"

    def collect_twice(self, inst: I) -> str:
        first = self.session(inst)
        try:
            second = self.s.collect(inst)
        except CallTimeout:
            raise
        except (PluginCrashed, PluginTimeout) as e:
            raise ClauseFailed(f"second collect(): {e}") from None
        except PolyprofError as e:
            return f"second collect() refused with {type(e).__name__}"
        except Exception as e:
            raise ClauseFailed(f"second collect() raised {type(e).__name__}: {e}") from None
        if isinstance(first, bytes):
            if not isinstance(second, bytes) or first != second:
                got = len(second) if isinstance(second, bytes) else type(second).__name__
                raise ClauseFailed(f"second collect() returned different bytes ({got} vs {len(first)})")
            return f"second collect() returned the same {len(first)} bytes"
        if not isinstance(first, Trace) or not isinstance(second, Trace) or second.n_events != first.n_events:
            raise ClauseFailed("second collect() returned different data")
        return "second collect() returned the same data"

    def buffer_too_small(self, inst: I) -> str:
        if not isinstance(inst, (NativeHandle, RemoteHandle)):
            raise ClauseFailed("native plugins only")
        _must(lambda: self.s.start(inst), "start()")
        self.work(self.limits.activity_s)
        _must(lambda: self.s.stop(inst), "stop()")
        code, need, msg = self.s._timed("collect", lambda: inst.collect_raw(None, 0), in_thread=True)
        if code != OK:
            raise ClauseFailed(f"collect(NULL) (asking the size) returned {code_name(code)}: {msg}")
        if need <= 0:
            raise ClauseFailed("collect(NULL) reported a size of 0 bytes; an XSpace has at least one plane")
        cap = need // 2
        buf = (ctypes.c_ubyte * (need + _GUARD))()
        ctypes.memset(buf, _CANARY, need + _GUARD)
        code, size, msg = self.s._timed("collect", lambda: inst.collect_raw(buf, cap), in_thread=True)
        tail = bytes(buf[cap:])
        overrun = next((i for i in range(len(tail) - 1, -1, -1) if tail[i] != _CANARY), -1) + 1
        problems = []
        if code != ERR_BUFFER_TOO_SMALL:
            problems.append(f"collect() with a {cap}-byte buffer ({need} needed) returned {code_name(code)} "
                            "instead of ERR_BUFFER_TOO_SMALL")
        elif size < need:
            problems.append(f"ERR_BUFFER_TOO_SMALL but *size = {size}, less than the {need} bytes needed")
        if overrun:
            problems.append(f"wrote {overrun} bytes past the end of the {cap}-byte buffer (capacity ignored)")
        if problems:
            raise ClauseFailed("; ".join(problems))
        full = (ctypes.c_ubyte * (need + _GUARD))()
        ctypes.memset(full, _CANARY, need + _GUARD)
        code, size, msg = self.s._timed("collect", lambda: inst.collect_raw(full, need), in_thread=True)
        if code != OK:
            raise ClauseFailed(f"collect() with a buffer of exactly the size it asked for ({need}) "
                               f"returned {code_name(code)}: {msg}")
        if size != need or bytes(full[need:]) != bytes([_CANARY]) * _GUARD:
            raise ClauseFailed(f"collect() into a {need}-byte buffer wrote {size} bytes or past its end")
        return f"{cap}-byte buffer refused with ERR_BUFFER_TOO_SMALL and size {size}; nothing written past it"

    def xspace_well_formed(self, inst: I) -> str:
        from ..formats.xspace import parse  # the XSpace reader: only when a native plugin is checked

        data = self.session(inst)
        if not isinstance(data, bytes):
            raise ClauseFailed("native plugins only")
        try:
            space = parse(data, source=f"collect() of {self.s.name}")
        except PolyprofError as e:
            raise ClauseFailed(f"malformed XSpace: {e}") from None
        problems = xspace_problems(space)
        if problems:
            raise ClauseFailed("malformed XSpace: " + "; ".join(problems))
        n = sum(len(line.events) for p in space.planes for line in p.lines)
        return f"{len(data)} bytes, {len(space.planes)} plane(s), {n} events, every metadata id defined"

    def stop_race(self, inst: I) -> str:
        from .recorder import section  # the kit's workload marks a section as a program does

        halt = threading.Event()
        errors: list[str] = []

        def busy(i: int) -> None:
            a = np.random.default_rng(i).random((96, 96))
            try:
                while not halt.is_set():
                    with section(f"polyprof-kit worker {i}"):
                        a = a @ a
                        a /= np.abs(a).max() or 1.0
            except Exception as e:  # the plugin must not make user threads fail
                errors.append(f"worker {i}: {type(e).__name__}: {e}")

        _must(lambda: self.s.start(inst), "start()")
        workers = [threading.Thread(target=busy, args=(i,), name=f"polyprof-kit-{i}", daemon=True)
                   for i in range(4)]
        for w in workers:
            w.start()
        try:
            time.sleep(self.limits.activity_s)
            t0 = time.perf_counter()
            _must(lambda: self.s.stop(inst), "stop() while 4 threads were busy")
            took = time.perf_counter() - t0
            refused = _expect_error(lambda: self.s.stop(inst), "second stop()")
        finally:
            halt.set()
            for w in workers:
                w.join(5.0)
        if errors:
            raise ClauseFailed("busy threads failed while the plugin stopped: " + "; ".join(errors[:3]))
        data = _must(lambda: self.s.collect(inst), "collect() after the raced stop()")
        trace = _must(lambda: self.s.to_trace(inst, data), "reading what collect() returned")
        _must(trace.validate, "validating the trace")
        return (f"stop() returned in {took * 1e3:.1f} ms while 4 threads were busy; {refused}; "
                f"collect gave {trace.n_events} events")

    def program_state(self, inst: I) -> str:
        """A Python plugin (or a native one loaded in-process) runs in the program's
        process: what it changes there, the program sees. What the session puts back
        (the directory, stdout) still fails here: the plugin is wrong, and the kit tells
        its author before users meet it. (C code writing to file descriptor 1 is not seen.)"""
        self.work(0.0)  # what the workload itself changes (a framework's import) is not the plugin's
        before = _ProgramState()
        with _Printed() as printed:
            self.session(inst)
        changed, notes = before.changed_and_put_back()
        if printed.text:
            shown = printed.text.strip().splitlines()[0][:80] if printed.text.strip() else repr(printed.text[:20])
            changed.append(f"printed {len(printed.text)} characters to stdout ({shown!r}): use logging or ctx.warn")
        if changed:
            raise ClauseFailed("; ".join(changed + notes))
        return "; ".join(["working directory, environment, stdout and Python signal handlers as they were",
                          *notes])

    def valid_trace(self) -> str:
        """Through polyprof's own wrapper (for a native plugin, NativePlugin: what the
        session really uses, clock mapping included)."""
        s = self.s
        if isinstance(s, _NativeSubject):
            path, options = s.path, s.options
            inst: Plugin = _must(lambda: NativePlugin(path, **options), "loading with NativePlugin")
        elif isinstance(s, _PythonSubject):
            inst = _must(s.new, "creating an instance")
        else:
            raise ClauseFailed(f"no way to drive a {s.kind} plugin through polyprof's wrapper")
        ctx = SessionContext(start_ns=now_ns(), wall_anchor=wall_anchor())
        t0 = now_ns()
        native = isinstance(s, _NativeSubject)  # native code may run in any thread
        _must(lambda: s._timed("start", lambda: inst.start(ctx), in_thread=native), "start()")
        self.work(self.limits.activity_s)
        _must(lambda: s._timed("stop", inst.stop, in_thread=native), "stop()")
        t1 = now_ns()
        result = _must(lambda: s._timed("collect", inst.collect, in_thread=True), "collect()")
        if not isinstance(result, Trace):
            raise ClauseFailed(f"collect() returned {type(result).__name__}, not a Trace")
        try:
            result.validate()
        except PolyprofError as e:
            raise ClauseFailed(f"the Trace does not validate: {e}") from None
        n_ev, n_ctr = result.n_events, len(result.counters["ts_ns"])
        if n_ev:
            lo, hi = int(result.start_ns.min()), int(result.end_ns.max())
            if lo < t0 - _SLACK_NS or hi > t1 + _SLACK_NS:
                raise ClauseFailed(_outside("events", lo, hi, t0, t1))
        if n_ctr:
            ts = result.counters["ts_ns"]
            if int(ts.min()) < t0 - _SLACK_NS or int(ts.max()) > t1 + _SLACK_NS:
                raise ClauseFailed(_outside("counter samples", int(ts.min()), int(ts.max()), t0, t1))
        if not n_ev and not n_ctr:
            return "valid but empty: nothing was recorded during the kit's workload"
        return (f"{n_ev} events, {n_ctr} counter samples on {len(result.planes)} plane(s), "
                "all inside the session")


def _outside(what: str, lo: int, hi: int, t0: int, t1: int) -> str:
    return (f"{what} span [{(lo - t0) / 1e6:+.1f} ms, {(hi - t0) / 1e6:+.1f} ms] relative to start(), "
            f"outside the session [0, {(t1 - t0) / 1e6:.1f} ms]: not on the session clock "
            "(CLOCK_MONOTONIC), or not synced")


class _ProgramState:
    """The working directory, the environment and Python's signal handlers now."""

    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.env = dict(os.environ)
        self.handlers = {s: signal.getsignal(s) for s in signal.valid_signals()
                         if s not in (signal.SIGKILL, signal.SIGSTOP)}

    def changed_and_put_back(self) -> tuple[list[str], list[str]]:
        """What differs now: (what the plugin must not do, what it may: variables added
        to the environment, as a library's import adds its own); all put back, so later
        clauses (and the kit's caller) start as they were."""
        out, notes = [], []
        if os.getcwd() != self.cwd:
            out.append(f"changed the working directory to {os.getcwd()} (from {self.cwd})")
            os.chdir(self.cwd)
        env = dict(os.environ)
        if env != self.env:
            changed = sorted(k for k in self.env if env.get(k) != self.env[k])
            added = sorted(set(env) - set(self.env))
            if changed:
                out.append(f"changed or removed environment variables: {', '.join(changed[:8])}")
            if added:
                notes.append(f"added to the environment: {', '.join(added[:8])}")
            os.environ.clear()
            os.environ.update(self.env)
        moved = [signal.Signals(s).name for s, h in self.handlers.items() if signal.getsignal(s) != h]
        if moved:
            out.append(f"changed the Python signal handlers of {', '.join(moved)}")
        return out, notes


class _Printed:
    """``sys.stdout`` replaced while a clause runs (any thread: the kit runs no program);
    what was written is kept and shown on stderr."""

    def __init__(self) -> None:
        self.text = ""
        self._real = sys.stdout

    def write(self, text: str) -> int:
        self.text += text
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def __enter__(self) -> "_Printed":
        sys.stdout = cast(TextIO, self)  # write and flush: what print() uses
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout = self._real


# ------------------------------------------------------------------ entry point
def check(target: str, *, options: dict[str, object] | None = None, limits: Limits | None = None,
          workload_fn: Callable[[float], object] | None = None) -> Report:
    """Run every clause against ``target``; never raises for a misbehaving plugin.

    A Python plugin runs in the kit's process: one that crashes it (``abort()``, a
    segfault) ends the kit, and faulthandler, on while the kit runs, prints every
    thread's traceback: the plugin's code, and the clause (a method of ``_Run``)."""
    fault = not faulthandler.is_enabled()
    if fault:
        try:
            faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)
        except (AttributeError, ValueError, OSError, RuntimeError):  # no stderr with a file descriptor
            fault = False
    state = _ProgramState()
    try:
        return _check(target, options, limits, workload_fn)
    finally:
        state.changed_and_put_back()  # the caller (a test suite) goes on as it was
        if fault:
            faulthandler.disable()


def _check(target: str, options: dict[str, object] | None, limits: Limits | None,
           workload_fn: Callable[[float], object] | None) -> Report:
    limits = limits or Limits()
    report = Report(target, results=[ClauseResult(cid, title) for cid, title in CLAUSES])
    res = {r.id: r for r in report.results}
    try:
        subject = _subject(target, dict(options or {}), limits)
    except (ClauseFailed, PluginError) as e:
        res["load"].status, res["load"].reason = FAIL, str(e)
        for r in report.results[1:]:
            r.reason = "the plugin did not load"
        return report
    except Exception as e:
        res["load"].status, res["load"].reason = FAIL, f"{type(e).__name__}: {e}"
        return report
    report.kind, report.plugin = subject.kind, subject.name
    res["load"].status, res["load"].reason = PASS, subject.describe
    work = workload_fn or getattr(getattr(subject, "factory", None), "conformance_workload", None) or workload
    if isinstance(subject, _NativeSubject):
        steps = _steps(_Run(subject, limits, work))
    else:
        steps = _steps(_Run(subject, limits, work))
    for cid, fn in steps:
        r = res[cid]
        if cid in NATIVE_ONLY and subject.kind != "native":
            r.status, r.reason = NA, "native plugins only (Python plugins return a Trace)"
            continue
        try:
            r.reason = _guarded(subject, fn, cid)
            r.status = PASS
        except ClauseFailed as e:
            r.status, r.reason = FAIL, str(e)
        except Exception as e:  # a bug in the plugin that escaped everything else
            r.status, r.reason = FAIL, f"{type(e).__name__}: {e}"
    t = subject.timings
    timed_out = {m.split("(", 1)[0] for m in subject.timeouts}
    timed_out |= {"collect" for k in timed_out if k.startswith("collect")}
    over = [f"{k}() took {t[k]:.2f} s > {lim:g} s" for k, lim in
            (("start", limits.start_s), ("stop", limits.stop_s), ("collect", limits.collect_s))
            if t[k] > lim and k not in timed_out]
    r = res["time_limits"]
    if subject.timeouts or over:
        r.status, r.reason = FAIL, "; ".join(dict.fromkeys(subject.timeouts + over))
    else:
        r.status = PASS
        r.reason = (f"slowest start {t['start'] * 1e3:.1f} ms, stop {t['stop'] * 1e3:.1f} ms, "
                    f"collect {t['collect'] * 1e3:.1f} ms (limits {limits.start_s:g}/{limits.stop_s:g}/"
                    f"{limits.collect_s:g} s)")
    return report


def _steps(run: _Run[I, D]) -> list[tuple[str, Callable[[], str]]]:
    """Each clause as a call, in report order."""
    return [  # program_state first: it compares with the process as the kit found it
        ("program_state", lambda: run.with_instance(run.program_state)),
        ("lifecycle", lambda: run.with_instance(run.lifecycle)),
        ("double_start", lambda: run.with_instance(run.double_start)),
        ("collect_without_start", lambda: run.with_instance(run.collect_without_start)),
        ("collect_twice", lambda: run.with_instance(run.collect_twice)),
        ("buffer_too_small", lambda: run.with_instance(run.buffer_too_small)),
        ("xspace_well_formed", lambda: run.with_instance(run.xspace_well_formed)),
        ("stop_race", lambda: run.with_instance(run.stop_race)),
        ("valid_trace", run.valid_trace),
    ]


def _guarded(subject: _Timings, fn: Callable[[], str], clause: str) -> str:
    """Run one clause. Native calls carry their own time limit; a Python plugin's
    start() and stop() run in the thread that drives it (as in a session), so the clause
    runs in a thread of its own, started, stopped and collected from there, and a call
    that overruns its limit is reported and abandoned instead of hanging the kit."""
    if subject.kind == "native":
        return fn()
    value: list[str] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            value.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            error.append(e)

    t = threading.Thread(target=run, name=f"polyprof-kit-{clause}", daemon=True)
    t.start()
    while True:
        t.join(0.02)
        if not t.is_alive():
            break
        cur = subject.current.get(t.ident or 0)
        if cur is not None and time.perf_counter() - cur[1] > cur[2]:
            what, t0, limit = cur
            msg = f"{what}() did not return within {limit:g} s"
            subject.timeouts.append(msg)
            key = "collect" if what.startswith("collect") else what
            subject.timings[key] = max(subject.timings.get(key, 0.0), time.perf_counter() - t0)
            raise CallTimeout(f"{msg}; the kit abandoned this instance (its thread is still inside {what}())")
    if error:
        raise error[0]
    return value[0]
