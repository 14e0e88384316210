"""The options of a profiling session, declared once.

:class:`SessionOptions` is the one list of what a session can be asked for. Every entry
reads it: ``polyprof.profile(...)`` as a context manager and as a decorator (keyword
arguments), ``polyprof run`` (its flags are made from the declarations below:
:func:`add_arguments`) and the environment (``POLYPROF_<NAME>``: :func:`from_environ`).
An option given explicitly wins over the environment, which wins over the default.

======================  ==========================  =======================  ============
option                  ``polyprof run`` flag        environment variable     default
======================  ==========================  =======================  ============
``plugins``             ``--plugins A,B``            ``POLYPROF_PLUGINS``     every available one
``output``              ``-o/--output PATH``         ``POLYPROF_OUTPUT``      none (run: SCRIPT.polyprof)
``memory``              ``--memory``                 ``POLYPROF_MEMORY``      off
``schedule``            ``--schedule TEXT``          ``POLYPROF_SCHEDULE``    every step
``delay``               ``--delay S``                ``POLYPROF_DELAY``       0
``duration``            ``--duration S``             ``POLYPROF_DURATION``    until the end
``max_host_events``     ``--max-events N``           ``POLYPROF_MAX_EVENTS``  every section
``options``             ``--plugin-options JSON``    ``POLYPROF_PLUGIN_OPTIONS``  none
``collect_timeout``     ``--collect-timeout S``      ``POLYPROF_COLLECT_TIMEOUT``  30
``call_timeout``        ``--call-timeout S``         ``POLYPROF_CALL_TIMEOUT``  10
``record_argv``         ``--record-argv``            ``POLYPROF_RECORD_ARGV`` off
``follow_symlinks``     ``--follow-symlinks``        ``POLYPROF_FOLLOW_SYMLINKS``  off
======================  ==========================  =======================  ============

(``tests/test_options.py`` checks that this table, the flags and the variables are the
dataclass's fields, and drives each option through every entry.)
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from ..errors import PolyprofError, SessionError
from .schedule import Schedule

if TYPE_CHECKING:
    from .plugin import Plugin

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


T = TypeVar("T")


def _option(default: T, help: str, *, kind: str, flags: tuple[str, ...], metavar: str | None = None,
            factory: Callable[[], T] | None = None) -> T:
    """One option's declaration: its default, its help, how its text is read (``kind``)
    and its ``polyprof run`` flags; its environment variable is ``POLYPROF_<NAME>``."""
    meta = {"help": help, "kind": kind, "flags": flags, "metavar": metavar}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)  # type: ignore[no-any-return]  # a Field, read as its value


@dataclass(frozen=True)
class SessionOptions:
    """What a profiling session is asked for (see the module doc for each entry)."""

    plugins: tuple[str | Plugin, ...] | None = _option(
        None, "comma-separated plugins to use: installed names, pkg.module:Factory or path.so (default: every "
              "available one; see `polyprof plugins`)", kind="plugins", flags=("--plugins",), metavar="A,B")
    output: Path | None = _option(
        None, "trace file to write (run's default: SCRIPT_STEM.polyprof); its ending picks the format, as for "
              "export (.json.gz Chrome JSON, .pt.trace.json Kineto, .pftrace Perfetto, .xplane.pb XSpace, .parquet; "
              "any other: polyprof's own); missing directories are made; a trace there is replaced, unless another "
              "run wrote it while this one ran (then beside it: T.1.polyprof); a file there that is no trace is "
              "never replaced (run refuses it)",
        kind="path", flags=("-o", "--output"), metavar="PATH")
    memory: bool = _option(
        False, "record memory: every plugin's allocations and frees (torch, OpenCL buffers...)",
        kind="bool", flags=("--memory",))
    schedule: Schedule | None = _option(
        None, "record only some steps (polyprof.step() calls or detected optimizer steps), as torch.profiler's "
              "schedule: skip S steps (skip_first=S), then R cycles (repeat=R, default 1; 0: until the end) of "
              "W steps not recorded, U recorded and dropped (warm-up), A kept. A long "
              "run then holds only the steps asked for", kind="schedule", flags=("--schedule",),
        metavar="wait=W,warmup=U,active=A[,...]")
    delay: float = _option(
        0.0, "record nothing for the first S seconds (as nsys --delay); steps and sections still count",
        kind="seconds", flags=("--delay",), metavar="S")
    duration: float | None = _option(
        None, "record for S seconds (after --delay), then nothing more (as nsys --duration)",
        kind="seconds", flags=("--duration",), metavar="S")
    max_host_events: int | None = _option(
        None, "keep at most N sections in memory: the oldest beyond it are dropped and counted (a long run's "
              "host records bounded)", kind="count", flags=("--max-events",), metavar="N")
    options: Mapping[str, Mapping[str, object]] = _option(
        {}, "keyword options per plugin, as JSON: '{\"host\": {\"sample_interval_s\": 0.01}}'",
        kind="json", flags=("--plugin-options",), metavar="JSON", factory=dict)
    collect_timeout: float = _option(
        30.0, "seconds each device plugin's collect step may take before its data is dropped (default 30)",
        kind="seconds", flags=("--collect-timeout",), metavar="S")
    call_timeout: float = _option(
        10.0, "seconds each device plugin's start and stop may take before it is abandoned (default 10)",
        kind="seconds", flags=("--call-timeout",), metavar="S")
    record_argv: bool = _option(
        False, "keep the script's arguments in the trace (default: left out, they may hold secrets)",
        kind="bool", flags=("--record-argv",))
    follow_symlinks: bool = _option(
        False, "write the trace through a symbolic link at the output path (default: refuse)",
        kind="bool", flags=("--follow-symlinks",))

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.plugins is not None:
            if isinstance(self.plugins, str):
                put(self, "plugins", tuple(_read("plugins", self.plugins)))
            else:
                put(self, "plugins", tuple(self.plugins))
        if self.output is not None and not isinstance(self.output, Path):
            put(self, "output", Path(self.output))
        put(self, "schedule", _schedule(self.schedule))
        opts = self.options or {}
        if isinstance(opts, str):
            opts = _read("options", opts)
        if not isinstance(opts, Mapping) or not all(isinstance(v, Mapping) for v in opts.values()):
            raise SessionError(f"options={opts!r}: expected a mapping of plugin name -> keyword options")
        put(self, "options", {str(k): dict(v) for k, v in opts.items()})
        for name in ("collect_timeout", "call_timeout"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = _read(name, value)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise SessionError(f"{name}={value!r}: expected a number of seconds above 0")
            put(self, name, float(value))
        for name in ("delay", "duration"):
            value = getattr(self, name)
            if value is None and name == "duration":
                continue
            if isinstance(value, str):
                value = _read(name, value)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    value > 0 or (name == "delay" and value == 0)) or value != value:
                raise SessionError(f"{name}={value!r}: expected a number of seconds"
                                   + (", 0 or more" if name == "delay" else " above 0"))
            put(self, name, float(value))
        if self.schedule is not None and (self.delay or self.duration is not None):
            raise SessionError("a schedule (steps) and delay/duration (seconds) both choose what is recorded: "
                               "give one of them")
        if self.max_host_events is not None:
            value = self.max_host_events
            if isinstance(value, str):
                value = _read("max_host_events", value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SessionError(f"max_host_events={value!r}: expected a whole number, 1 or more")
            put(self, "max_host_events", value)
        for name in ("memory", "record_argv", "follow_symlinks"):
            value = getattr(self, name)
            put(self, name, _read(name, value) if isinstance(value, str) else bool(value))

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: the options' names, in declaration order
NAMES = tuple(f.name for f in fields(SessionOptions))


#: options whose environment variable is named after their flag, not the field
_ENV = {"options": "PLUGIN_OPTIONS", "max_host_events": "MAX_EVENTS"}
#: an earlier name of an option's variable, still read where the variable is not set
_FORMER = {"max_host_events": "POLYPROF_MAX_HOST_EVENTS"}


def env_name(name: str) -> str:
    """The environment variable of option ``name``: ``POLYPROF_`` and its flag's name
    (``--max-events``: ``POLYPROF_MAX_EVENTS``)."""
    return "POLYPROF_" + _ENV.get(name, name.upper())


def make(environ: Mapping[str, str] | None = None, /, **given: object) -> SessionOptions:
    """The options of a session: ``given`` over the environment's (``os.environ`` unless
    ``environ``), over the defaults. An unknown name is a :class:`SessionError`."""
    unknown = sorted(set(given) - set(NAMES))
    if unknown:
        raise SessionError(f"unknown session option {', '.join(map(repr, unknown))}; the options are "
                           f"{', '.join(NAMES)}")
    # values as given (text, numbers, objects): SessionOptions.__post_init__ checks and normalises each
    values: dict[str, Any] = from_environ(environ)
    values.update({k: v for k, v in given.items() if not (k == "plugins" and v is None)})
    return SessionOptions(**values)


def from_environ(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The options set in the environment (``POLYPROF_<NAME>``), read from their text."""
    env = os.environ if environ is None else environ
    out: dict[str, object] = {}
    for name in NAMES:
        var = env_name(name)
        if var not in env and _FORMER.get(name, "") in env:
            var = _FORMER[name]
        text = env.get(var)
        if text is not None and (text.strip() or name not in ("plugins", "output", "schedule", "options",
                                                                "duration", "max_host_events")):
            out[name] = _read(name, text, f"${var}")
    return out


def add_arguments(parser: argparse._ActionsContainer, names: tuple[str, ...] = NAMES) -> None:
    """The flags of the options ``names`` (default: all), as declared; every default
    is None (not given: the environment's, else the option's default)."""
    for f in fields(SessionOptions):
        if f.name not in names:
            continue
        meta = f.metadata
        if meta["kind"] == "bool":
            parser.add_argument(*meta["flags"], dest=f.name, action="store_const", const=True, default=None,
                                help=f"{meta['help']} (also ${env_name(f.name)}=1)")
        else:
            parser.add_argument(*meta["flags"], dest=f.name, default=None, metavar=meta["metavar"],
                                help=f"{meta['help']} (also ${env_name(f.name)})")


def flag_of(name: str) -> str:
    """Option ``name``'s ``polyprof run`` flag (its long form)."""
    return next(f.metadata["flags"][-1] for f in fields(SessionOptions) if f.name == name)


def from_arguments(args: argparse.Namespace, names: tuple[str, ...] = NAMES) -> dict[str, object]:
    """The options given as flags (parsed by :func:`add_arguments`), read from their text."""
    out: dict[str, object] = {}
    for f in fields(SessionOptions):
        value = getattr(args, f.name, None) if f.name in names else None
        if value is not None:
            out[f.name] = _read(f.name, value, f.metadata["flags"][-1]) if isinstance(value, str) else value
    return out


def _read(name: str, text: str, where: str | None = None) -> object:
    """Option ``name``'s value from its text (a flag's or a variable's)."""
    kind = next(f.metadata["kind"] for f in fields(SessionOptions) if f.name == name)
    where = where or name
    t = text.strip()
    try:
        if kind == "bool":
            if t.lower() in _TRUE:
                return True
            if t.lower() in _FALSE:
                return False
            raise ValueError("expected 1/0, true/false, yes/no or on/off")
        if kind == "seconds":
            return float(t)
        if kind == "count":
            return int(t)
        if kind == "path":
            return Path(t)
        if kind == "json":
            return json.loads(t) if t else {}
        if kind == "schedule":
            return Schedule.parse(t)
        if kind == "plugins":
            return plugin_targets(t)
    except PolyprofError:
        raise
    except ValueError as e:
        raise SessionError(f"{where}={text!r}: {e}") from None
    raise AssertionError(kind)


def plugin_targets(text: str) -> list[str]:
    """``A,B`` -> the plugins named: installed names, ``pkg.module:Factory`` and
    ``path.so`` targets (each session makes its own plugin from a target)."""
    return [p.strip() for p in text.split(",") if p.strip()]


def _schedule(spec: object) -> Schedule | None:
    """A Schedule from what a session was given (None: record every step)."""
    if spec is None or isinstance(spec, Schedule):
        return spec
    if isinstance(spec, str):
        return Schedule.parse(spec)
    if isinstance(spec, dict):
        return Schedule(**spec)
    raise SessionError(f"schedule={spec!r}: expected polyprof.schedule(...), its text or None")
