"""The session's plugins, one slot each: which plugins a session makes (the default
ones that can run here, or those its plugin list names: entry points, targets and
plugin objects), with their options, and the slot that holds each with what happened
to it (collect/session.py calls them through their slots)."""

from __future__ import annotations

import difflib
import logging
from typing import TYPE_CHECKING

from .. import logs
from ..errors import PluginError
from .clock import now_ns
from .guard import Kept, start_guarded
from .plugin import Plugin
from .registry import discover, is_target, load_target, resolve

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(logs.LOGGER)


class Slot:
    """One plugin in a session and what happened to it."""

    def __init__(self, name: str, plugin: Plugin):
        self.name = name
        self.plugin = plugin
        self.started = False
        self.status = "new"
        #: start()/stop() must run on the session's own thread (thread-local profiler state)
        self.here = bool(getattr(plugin, "session_thread_only", False))

    @property
    def limited(self) -> bool:
        """The next call runs in a helper thread under a time limit. Asked before each
        call: a plugin may say False once the call left does only CPU work on data in
        memory (the host plugin always; the torch plugin's collect of what it read from
        torch's memory), sparing a thread hand-off; never raises (True then)."""
        try:
            return bool(getattr(self.plugin, "time_limited", True))
        except Exception:
            return True


def make_slots(session: "Session") -> list[Slot]:
    """The session's plugins, each in its slot: the default ones that can run here (those
    that cannot are said in ``session.skipped``), or those its plugin list names (the host
    plugin always), entry points, targets and plugin objects; one that cannot be made is
    the session's error, not an exception."""
    spec = session.plugin_spec
    names = None if spec is None else [p for p in spec if isinstance(p, str) and not is_target(p)]
    if names is not None and "host" not in names:
        names = ["host", *names]
    slots: list[Slot] = []
    if names is None:  # say which default plugins can't run here, and why (not an error)
        found = discover(session=True)  # one discovery: each plugin is loaded and checked once
        session.skipped = {i.name: f"unavailable: {i.availability.reason}" for i in found.values()
                           if i.default and not i.availability.ok}
        for i in found.values():
            if i.name not in session.skipped:
                continue
            if i.failed:  # broken (its import or check raised or hung): the trace's error, as a named one's
                session._error(i.name, "load", f"not available: {i.availability.reason}")
            else:
                log.info("plugin %s not used: %s", i.name, session.skipped[i.name])
        infos = [i for i in found.values() if i.default and i.availability.ok]
    else:
        infos = resolve(names)
    for info in infos:
        if info.factory is None or not info.availability.ok:  # named, cannot run: an error, and listed
            session._error(info.name, "load", f"not available: {info.availability.reason}")
            session.skipped[info.name] = f"unavailable: {info.availability.reason}"
            continue
        try:
            opts = session.options.get(info.name, {})
            made = info.factory(**({"memory": True, **opts} if session.memory else opts))
            if not isinstance(made, Plugin):
                raise PluginError(f"the factory returned {type(made).__name__}, not a polyprof Plugin")
            _check_options(session, info.name, made, opts)
            slots.append(Slot(info.name, made))
        except Exception as e:
            session._error(info.name, "create", describe(e))
    for p in spec or []:
        if isinstance(p, str) and is_target(p):  # pkg.module:Factory or path.so: made for each session
            try:
                opts = session.options.get(p, {})
                loaded = load_target(p, **({"memory": True, **opts} if session.memory else opts))
            except Exception as e:
                session._error(p, "create", describe(e))
                continue
            slots.append(Slot(str(getattr(loaded, "name", type(loaded).__name__)), loaded))
        elif not isinstance(p, str):
            if session.memory and isinstance(getattr(p, "options", None), dict):
                p.options.setdefault("memory", True)
            slots.append(Slot(str(getattr(p, "name", type(p).__name__)), p))
    known = {i.name for i in infos} | set(session.skipped) | {p for p in spec or [] if isinstance(p, str)}
    for key in sorted(set(session.options) - known - {"host"}):
        log.warning("plugin options for %r not used: no plugin of this session is given as %r "
                    "(options are keyed as the plugin is named in --plugins)", key, key)
    return slots


def _check_options(session: "Session", name: str, plugin: Plugin, opts: dict[str, object]) -> None:
    """Warn, in the trace and the log, of each option given a plugin that it does not read
    (its ``option_names``), with the nearest one it does: a misspelt ``record_shape``
    was ignored without a word."""
    known = getattr(type(plugin), "option_names", None)
    if known is None:
        return
    for key in sorted(set(opts) - known - {"memory"}):
        near = difflib.get_close_matches(key, sorted(known), 1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        message = (f"option {key!r} is not one it reads, so it is ignored{hint} "
                   f"(its options: {', '.join(sorted(known))})")
        if session._ctx is not None:
            session._ctx.warn(name, message)
        else:
            log.warning("plugin %s: %s", name, message)


def stop_together(session: "Session", slots: list[Slot]) -> int:
    """Stop every started plugin at once, each within the session's call limit; when the
    last one that returned did, on the session clock. Those that stop in a helper thread
    are all set off first, then those that stop on this thread (the host plugin, the
    session-thread-only ones) are stopped here in reverse order, then the helpers are
    waited for: one whose stop hangs is abandoned after its limit and no other plugin
    records meanwhile (before, each waited its turn behind it: a 0.6 s program whose
    first-stopped plugin hung gave a 10.4 s trace of another's events). A plugin that
    failed to stop is not collected (``started`` is cleared)."""
    t0 = now_ns()
    helpers = [s for s in reversed(slots) if s.started and s.limited and not s.here]
    kept = Kept(session.owns_process) if helpers else None
    running = [(s, start_guarded(s.plugin.stop, f"polyprof-stop-{s.name}")) for s in helpers]
    ends = []
    for slot in reversed(slots):
        if slot.started and slot not in helpers:
            if not session._call(slot, "stop", slot.plugin.stop):
                slot.started = False
            ends.append(now_ns())
    for slot, run in running:
        out = run.wait(max(0.0, session.call_timeout - (now_ns() - t0) / 1e9))
        if not out.timed_out:
            ends.append(run.ended_ns)
        if not session._called(slot, "stop", out, t0, run.ended_ns):
            slot.started = False
    if kept is not None:  # a directory changed in a helper's stop: put back (which one did is not known)
        note = kept.end("stop")
        if note is not None and session._ctx is not None:
            session._ctx.warn(", ".join(s.name for s in helpers), note)
    return max(ends, default=now_ns())


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
