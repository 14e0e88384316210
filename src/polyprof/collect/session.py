"""The session: starts plugins once, stops them once, collects with a time limit,
and merges what each returns into one Trace. A plugin that fails is reported in the
trace's metadata and on stderr; it never takes the other plugins' data with it.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from ..errors import PluginError, SessionError
from ..trace.core import Trace
from ..trace.merge import merge
from . import journal
from .clock import REFERENCE_CLOCK, now_ns, wall_anchor
from .plugin import SessionContext
from .registry import discover, resolve

log = logging.getLogger("polyprof")
F = TypeVar("F", bound=Callable[..., Any])

_active_lock = threading.Lock()
_active: "Session | None" = None


class _Slot:
    """One plugin in a session and what happened to it."""

    def __init__(self, name: str, plugin: Any):
        self.name = name
        self.plugin = plugin
        self.started = False
        self.status = "new"


class Session:
    """One capture. Use :func:`polyprof.profile` rather than this class directly.

    ``plugins``: names (entry points) or plugin objects; None = every available
    default plugin. The host plugin always runs (it records the sections).
    """

    def __init__(self, plugins: Sequence[str | Any] | None = None, *, output: str | Path | None = None,
                 collect_timeout: float = 30.0, options: dict[str, Any] | None = None):
        self.plugin_spec = list(plugins) if plugins is not None else None
        self.output = Path(output) if output else None
        self.collect_timeout = collect_timeout
        self.options = dict(options or {})
        self.trace: Trace | None = None
        self.errors: list[dict[str, str]] = []
        self._slots: list[_Slot] = []
        self._ctx: SessionContext | None = None
        self._stopped = False
        self.skipped: dict[str, str] = {}  # default plugins that can't run here -> why

    # ---------------------------------------------------------------- lifecycle
    def _make_slots(self) -> list[_Slot]:
        spec = self.plugin_spec
        names = None if spec is None else [p for p in spec if isinstance(p, str)]
        if names is not None and "host" not in names:
            names = ["host", *names]
        slots: list[_Slot] = []
        if names is None:  # say which default plugins can't run here, and why (not an error)
            self.skipped = {i.name: f"unavailable: {i.availability.reason}" for i in discover().values()
                            if i.default and not i.availability.ok}
            for name, why in self.skipped.items():
                log.info("plugin %s not used: %s", name, why)
        for info in resolve(names):
            if info.factory is None or not info.availability.ok:
                self._error(info.name, "load", f"not available: {info.availability.reason}")
                continue
            try:
                slots.append(_Slot(info.name, info.factory(**self.options.get(info.name, {}))))
            except Exception as e:
                self._error(info.name, "create", _describe(e))
        for p in spec or []:
            if not isinstance(p, str):
                slots.append(_Slot(str(getattr(p, "name", type(p).__name__)), p))
        return slots

    def start(self) -> "Session":
        global _active
        with _active_lock:
            if _active is not None:
                raise SessionError("a polyprof session is already active in this process")
            _active = self
        start = now_ns()
        self._ctx = SessionContext(start_ns=start, wall_anchor=wall_anchor(), options=self.options,
                                   journal_path=journal.path_for(self.output) if self.output else None,
                                   session_info=self._info())
        try:
            self._slots = self._make_slots()
        except BaseException:
            with _active_lock:
                _active = None
            raise
        seen: set[int] = set()
        for slot in self._slots:
            if id(slot.plugin) in seen:  # the same object twice: the contract says one start
                self._error(slot.name, "start", "plugin listed twice in one session; started once")
                continue
            seen.add(id(slot.plugin))
            if self._call(slot, "start", lambda s=slot: s.plugin.start(self._ctx)):
                slot.started = True
                slot.status = "started"
        return self

    def stop(self) -> Trace:
        global _active
        if self._stopped:
            if self.trace is None:
                raise SessionError("session stopped without a trace")
            return self.trace
        self._stopped = True
        try:
            for slot in reversed(self._slots):
                if slot.started and not self._call(slot, "stop", slot.plugin.stop):
                    slot.started = False  # no collect from a plugin that failed to stop
            end = now_ns()  # after every plugin stopped: their last samples are inside
            parts = []
            for slot in self._slots:
                if not slot.started:
                    continue
                part = self._collect(slot)
                if part is not None:
                    parts.append(part)
                    slot.status = "ok"
            self.trace = self._assemble(parts, end)
        finally:
            with _active_lock:
                _active = None
        if self.output is not None:
            try:
                self.trace.save(self.output)
            except Exception as e:
                log.error("could not write %s: %s (the host data so far is in %s)", self.output, e,
                          journal.path_for(self.output))
            else:
                journal.path_for(self.output).unlink(missing_ok=True)
        return self.trace

    def _collect(self, slot: _Slot) -> Trace | None:
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["trace"] = slot.plugin.collect()
            except BaseException as e:  # noqa: BLE001 - reported, never raised
                box["error"] = e
                box["tb"] = traceback.format_exc()

        t = threading.Thread(target=run, name=f"polyprof-collect-{slot.name}", daemon=True)
        t.start()
        t.join(self.collect_timeout)
        if t.is_alive():
            self._error(slot.name, "collect", f"timed out after {self.collect_timeout:g} s; its data is dropped")
            slot.status = "failed"
            return None
        if "error" in box:
            self._error(slot.name, "collect", _describe(box["error"]), box.get("tb"))
            slot.status = "failed"
            return None
        result = box.get("trace")
        if not isinstance(result, Trace):
            self._error(slot.name, "collect", f"returned {type(result).__name__}, not a Trace")
            slot.status = "failed"
            return None
        try:
            return result.validate()
        except Exception as e:
            self._error(slot.name, "collect", f"returned malformed data: {_describe(e)}")
            slot.status = "failed"
            return None

    def _call(self, slot: _Slot, phase: str, fn: Callable[[], Any]) -> bool:
        try:
            fn()
            return True
        except Exception as e:
            self._error(slot.name, phase, _describe(e), traceback.format_exc())
            slot.status = "failed"
            return False

    def _error(self, plugin: str, phase: str, message: str, tb: str | None = None) -> None:
        self.errors.append({"plugin": plugin, "phase": phase, "error": message})
        log.warning("polyprof plugin %r failed in %s: %s", plugin, phase, message)
        if tb:
            log.debug("%s", tb)

    def _assemble(self, parts: list[Trace], end: int) -> Trace:
        ctx = self._ctx
        assert ctx is not None
        meta = {
            "polyprof_version": _version(),
            "clock": REFERENCE_CLOCK,
            "session": {"start_ns": ctx.start_ns, "stop_ns": end, **self._info()},
            "wall_anchor": ctx.wall_anchor,
            "plugins": {**self.skipped, **{s.name: s.status for s in self._slots}},
            "plugin_errors": list(self.errors),
            "warnings": list(ctx.warnings),
        }
        try:
            return merge(parts, meta)
        except Exception as e:  # keep what merges; name the part that does not
            self._error("session", "merge", _describe(e))
            meta["plugin_errors"] = list(self.errors)
            good = []
            for p in parts:
                try:
                    merge([p])
                    good.append(p)
                except Exception:
                    pass
            return merge(good, meta)

    @staticmethod
    def _info() -> dict[str, Any]:
        return {"pid": os.getpid(), "hostname": socket.gethostname(), "argv": list(sys.argv)}

    # ---------------------------------------------------------------- sugar
    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc: object) -> bool:
        self.stop()
        return False

    def __call__(self, fn: F) -> F:
        """Use as a decorator: each call is profiled; the last trace is ``fn.trace``."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            s = Session(self.plugin_spec, output=self.output, collect_timeout=self.collect_timeout,
                        options=self.options)
            try:
                with s:
                    return fn(*args, **kwargs)
            finally:
                wrapper.trace = s.trace  # type: ignore[attr-defined]

        wrapper.trace = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("polyprof")
    except Exception:
        return "unknown"


def active_session() -> Session | None:
    return _active


def profile(plugins: Sequence[str | Any] | None = None, *, output: str | Path | None = None,
            collect_timeout: float = 30.0, options: dict[str, Any] | None = None) -> Session:
    """Profile a block or a function.

    ``with polyprof.profile() as prof: ...`` then ``prof.trace``; or
    ``@polyprof.profile(output="run.polyprof")``. ``options`` maps a plugin name to
    keyword options for it, e.g. ``{"host": {"sample_interval_s": 0.01}}``.
    """
    return Session(plugins, output=output, collect_timeout=collect_timeout, options=options)


__all__ = ["Session", "profile", "active_session", "PluginError"]
