"""Where plugins come from, all of it: the entry-point group ``polyprof.plugins``, the
native libraries listed by ``POLYPROF_PLUGIN_PATH``, and the targets a user names
(``path.so``, ``pkg.module:Factory``, an installed name). collect/native.py only loads
and drives a native library; it does not look for plugins."""

from __future__ import annotations

import importlib
import logging
import os
import threading
from pathlib import Path
from typing import Callable, NamedTuple

# the scanner is polyprof/entrypoints.py (formats and analyses read their groups too);
# EntryPoint, _normalise and _scan stay importable from here
from ..entrypoints import EntryPoint as EntryPoint, _normalise as _normalise, _scan as _scan
from ..entrypoints import entry_points as _entry_points
from .. import envvars
from ..errors import PluginError
from .plugin import Availability, Plugin

log = logging.getLogger("polyprof")
GROUP = "polyprof.plugins"
#: native plugin libraries (files, or directories of ``*.so``), os.pathsep-separated
ENV_PATH = "POLYPROF_PLUGIN_PATH"


def entry_points(group: str = GROUP) -> list[EntryPoint]:
    """What ``importlib.metadata.entry_points(group=group)`` gives (``polyprof/entrypoints.py``)."""
    return _entry_points(group)


#: how long one plugin's import and availability check may take before discovery goes on
#: without it (seconds; a device's first init, a driver's or a compiler's, may take seconds)
ENV_PROBE_LIMIT = "POLYPROF_PROBE_TIMEOUT"
PROBE_LIMIT_S = 10.0


# Named tuples, not dataclasses: every `polyprof run` discovers plugins, and defining
# this one (and entrypoints.EntryPoint) as dataclasses is slower.
class PluginInfo(NamedTuple):
    """One plugin found: its name, where it comes from (``module:attr`` or a library
    path), its factory (None: it cannot be loaded), whether it can run here, and
    whether a session runs it unless told which plugins to use. ``failed``: the plugin
    itself is broken (its import or availability check raised, or did not return within
    the probe's limit): a session reports it as an error, not as a plugin that cannot
    run here (its ``default`` is true where its class could not be read)."""

    name: str
    target: str
    factory: Callable[..., object] | None
    availability: Availability
    default: bool
    failed: bool = False


def probe_limit() -> float:
    """Seconds one plugin's probe may take (``POLYPROF_PROBE_TIMEOUT``, 10 s)."""
    return envvars.number(ENV_PROBE_LIMIT, PROBE_LIMIT_S, "seconds")


def _load_entries(eps: list[EntryPoint], session: bool | list[bool] = False, check: bool = True) -> list[PluginInfo]:
    """Each plugin loaded and its availability checked (``check``), under the probe's time
    limit (:class:`_Probes`); ``session``: for all of them or for each, whether the check
    is the one a session that names no plugins makes (:func:`_probe`)."""
    from .signals import SavedDispositions

    if not eps:
        return []
    sessions = [session] * len(eps) if isinstance(session, bool) else session
    limit = probe_limit()
    # probing loads device runtimes (PoCL/LLVM install SIGSEGV/SIGBUS/... handlers):
    # the program keeps the signal dispositions it had (restored once, after all of them)
    with SavedDispositions():
        found: dict[int, PluginInfo] = {}
        todo = []
        for i, ep in enumerate(eps):
            stuck = _still_stuck(ep, limit)
            if stuck is not None:
                found[i] = stuck
            else:
                todo.append(i)
        while todo:  # one thread probes them in order; one that hangs is left to it, the rest go on in another
            probes = _Probes([eps[i] for i in todo], [sessions[i] for i in todo], check)
            for j, i in enumerate(todo):
                info = probes.wait(j, limit)
                if info is None:  # stuck: said, and what follows it probed by a new thread
                    found[i] = _stuck(eps[i], probes, j, limit)
                    todo = todo[j + 1:]
                    break
                found[i] = info
            else:
                todo = []
    return [found[i] for i in range(len(eps))]


class _Probes:
    """Entry points probed one after the other (:func:`_probe`) in a daemon thread;
    ``sessions``: for each, whether a session that names no plugins asks it."""

    def __init__(self, eps: list[EntryPoint], sessions: list[bool], check: bool) -> None:
        self.eps = eps
        self.sessions = sessions
        self.infos: list[PluginInfo | None] = [None] * len(eps)
        #: each plugin's factory once its module is imported (what a stuck check's plugin is)
        self.factories: list[object] = [None] * len(eps)
        self.done = [threading.Event() for _ in eps]
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(check,), name="polyprof-probe", daemon=True).start()

    def _run(self, check: bool) -> None:
        for j, ep in enumerate(self.eps):
            try:
                self.infos[j] = _probe(ep, self.sessions[j], check, self.factories, j)
            except BaseException as e:  # noqa: BLE001 - _probe catches the plugin's: this is polyprof's, raised there
                self.error = e
            finally:
                self.done[j].set()

    def wait(self, j: int, limit: float) -> PluginInfo | None:
        """The ``j``-th plugin's info, once probed; None if not within ``limit`` seconds."""
        if not self.done[j].wait(limit):
            return None
        if self.error is not None:
            raise self.error
        return self.infos[j]


#: probes that overran their limit in this process, by (name, value): a later discovery
#: (of any kind) does not wait for them again, nor import the module a hung thread holds
_STUCK: dict[tuple[str, str], tuple[_Probes, int]] = {}


def _stuck(ep: EntryPoint, probes: _Probes, j: int, limit: float) -> PluginInfo:
    """A plugin whose import or availability check did not return within ``limit``: a
    wedged driver must not stop the command; its thread is abandoned (a daemon)."""
    _STUCK[(ep.name, ep.value)] = (probes, j)
    factory = probes.factories[j]
    what = "importing it" if factory is None else "its availability check"
    why = f"{what} did not return within {limit:g} s ({ENV_PROBE_LIMIT} sets the limit)"
    log.debug("plugin %s: %s", ep.name, why)
    return PluginInfo(ep.name, ep.value, None, Availability(False, why), bool(getattr(factory, "default", True)), True)


def _still_stuck(ep: EntryPoint, limit: float) -> PluginInfo | None:
    """The answer for a plugin whose probe overran earlier in this process and is still
    running (None: never stuck, or it has returned since: probed again)."""
    held = _STUCK.get((ep.name, ep.value))
    if held is None:
        return None
    if held[0].done[held[1]].is_set():
        del _STUCK[(ep.name, ep.value)]
        return None
    return _stuck(ep, held[0], held[1], limit)


def _probe(ep: EntryPoint, session: bool = False, check: bool = True, factories: list[object] | None = None,
           j: int = 0) -> PluginInfo:
    """One plugin imported and asked whether it can run here (``check``); its factory put
    in ``factories[j]`` once imported. Never raises for the plugin's errors."""
    try:
        factory = ep.load()
    except BaseException as e:  # noqa: BLE001 - an uninstallable plugin must not break discovery
        return PluginInfo(ep.name, ep.value, None, Availability(False, f"cannot import: {e}"), True, True)
    if not callable(factory):
        return PluginInfo(ep.name, ep.value, None, Availability(False, f"{ep.value} is not callable"), True, True)
    if factories is not None:
        factories[j] = factory
    default = bool(getattr(factory, "default", True))
    if not check:  # only its factory is wanted (resolve_factory): the caller checks
        return PluginInfo(ep.name, ep.value, factory, Availability(True), default)
    if session and not default:  # a session that names no plugins never runs it: not asked
        return PluginInfo(ep.name, ep.value, factory, Availability(False, "not a default plugin"), default)
    try:
        ask = getattr(factory, "session_availability" if session else "availability", None)
        if ask is None:
            ask = getattr(factory, "availability", None)
        avail = ask() if ask is not None else Availability(True)
    except BaseException as e:  # noqa: BLE001 - nor one whose check raises (SystemExit too)
        return PluginInfo(ep.name, ep.value, factory, Availability(False, f"availability check failed: {e}"),
                          default, True)
    return PluginInfo(ep.name, ep.value, factory, avail, default)


def discover(session: bool = False) -> dict[str, PluginInfo]:
    """Every plugin registered by any installed package, by name. ``session``: the
    availability a session checks before starting a plugin (``session_availability``,
    cheaper for plugins that start at an import), not the full check."""
    eps: dict[str, EntryPoint] = {}
    for ep in entry_points(GROUP):
        eps.setdefault(ep.name, ep)
    found = {info.name: info for info in _load_entries(list(eps.values()), session)}
    for info in _path_plugins_safe():  # POLYPROF_PLUGIN_PATH: native .so plugins
        found.setdefault(info.name, info)
    return found


class DefaultName(str):
    """A default plugin's name in a session's plugin list (:func:`default_names`): the
    session asks it what a session that names no plugins asks (``session_availability``:
    the opencl plugin then waits for the program's ``import pyopencl``), not the full
    check a plugin the user names gets. It compares and hashes as its plain name."""

    __slots__ = ()


def resolve(names: list[str] | None) -> list[PluginInfo]:
    """The plugins a session runs: the named ones, or every available default one.

    Only the named plugins that are installed entry points are loaded: a session asking
    for ``["host"]`` never probes (imports, initialises) the other device runtimes. A
    :class:`DefaultName` among them (``polyprof run --add-plugin X`` keeps the defaults so)
    gets the check of a session that names none, so that ``--add-plugin X`` costs a
    program that never imports pyopencl no more than a plain run does."""
    if names is None:
        return [p for p in discover(session=True).values() if p.default and p.availability.ok]
    eps: dict[str, EntryPoint] = {}
    for ep in entry_points(GROUP):
        eps.setdefault(ep.name, ep)
    known = list(dict.fromkeys(n for n in names if n in eps))  # (a DefaultName and its plain name: one key)
    infos = _load_entries([eps[n] for n in known], [isinstance(n, DefaultName) for n in known])
    found = dict(zip(known, infos))
    if len(found) < len(set(names)):  # the others: libraries on POLYPROF_PLUGIN_PATH, or no plugin
        for info in _path_plugins_safe():
            found.setdefault(info.name, info)
    out = []
    for n in names:
        if n not in found:
            raise PluginError(f"no plugin named {n!r}; installed: {', '.join(sorted(set(eps) | set(found))) or 'none'}")
        out.append(found[n])
    return out


def default_names() -> list[str]:
    """The plugins a session that names none makes (the default ones that can run here),
    and the default ones it reports as broken (:attr:`PluginInfo.failed`), each a
    :class:`DefaultName`: ``polyprof run --add-plugin X`` names them beside X, and the
    session makes or reports each again, with the check a session naming none makes."""
    return [DefaultName(i.name) for i in discover(session=True).values()
            if i.default and (i.availability.ok or i.failed)]


def is_installed(name: str) -> bool:
    """Whether ``name`` is an installed plugin's entry point (nothing is imported)."""
    return not is_target(name) and any(ep.name == name for ep in entry_points(GROUP))


# ------------------------------------------------------------------ native libraries and targets
def plugin_path_libraries(value: str | None = None) -> list[Path]:
    """Shared libraries listed by POLYPROF_PLUGIN_PATH (files, or directories of ``*.so``)."""
    value = os.environ.get(ENV_PATH, "") if value is None else value
    out: list[Path] = []
    for part in value.split(os.pathsep):
        if not part:
            continue
        p = Path(part).expanduser()
        if p.is_dir():
            out.extend(sorted(q for q in p.iterdir() if q.suffix == ".so" or ".so." in q.name))
        elif p.exists():
            out.append(p)
        else:
            log.warning("%s: %s does not exist", ENV_PATH, p)
    return out


def path_plugins() -> list[PluginInfo]:
    """Registry entries for the libraries on POLYPROF_PLUGIN_PATH."""
    if not os.environ.get(ENV_PATH, ""):
        return []  # the usual case: collect/native.py (and its clock fitting) is not imported
    from .native import describe, native_factory

    infos = []
    for lib in plugin_path_libraries():
        d = describe(lib)
        factory = native_factory(lib, d.name) if d.availability.ok else None
        infos.append(PluginInfo(d.name, str(d.path), factory, d.availability, True))
    # a mistyped entry is listed (unavailable, with the reason), not dropped silently
    for part in os.environ.get(ENV_PATH, "").split(os.pathsep):
        p = Path(part).expanduser() if part else None
        if p is not None and not p.exists():
            infos.append(PluginInfo(p.name, str(p), None,
                                    Availability(False, f"{ENV_PATH} entry {p} does not exist"), True))
    return infos


def is_library_path(target: str) -> bool:
    return target.endswith(".so") or ".so." in target or os.sep in target


def resolve_factory(target: str) -> Callable[..., object]:
    """The plugin factory named by ``pkg.module:Factory`` or an installed plugin name.
    An installed name's entry point alone is loaded (under the probe's time limit): no
    other plugin is imported or asked whether it can run (one that hangs there must not
    stop ``polyprof plugin check`` of this one)."""
    if ":" in target:
        return import_factory(target)
    eps = [ep for ep in entry_points(GROUP) if ep.name == target][:1]
    infos = _load_entries(eps, check=False) if eps else [i for i in _path_plugins_safe() if i.name == target][:1]
    if not infos:
        names = sorted({ep.name for ep in entry_points(GROUP)} | {i.name for i in _path_plugins_safe()})
        raise PluginError(f"{target!r} is not a .so file, a module:Factory, or an installed plugin "
                          f"(installed: {', '.join(names) or 'none'})")
    info = infos[0]
    if info.factory is None:
        raise PluginError(f"plugin {target!r} cannot be loaded: {info.availability.reason}")
    return info.factory


def _path_plugins_safe() -> list[PluginInfo]:
    try:
        return path_plugins()
    except Exception as e:  # a bad path entry must not break discovery
        log.warning("%s: %s", ENV_PATH, e)
        return []


def is_target(name: str) -> bool:
    """Whether a plugin named in a session's list is a target to load (``pkg.module:Factory``
    or a library path) rather than an installed plugin's name."""
    return ":" in name or is_library_path(name)


def load_target(target: str, **options: object) -> Plugin:
    """A plugin object from ``path.so``, ``pkg.module:Factory`` or a registered name."""
    if is_library_path(target):
        from .native import load_native

        return load_native(target, **options)
    plugin = resolve_factory(target)(**options)
    if not isinstance(plugin, Plugin):
        raise PluginError(f"{target}: the factory returned {type(plugin).__name__}, not a polyprof Plugin")
    return plugin


def import_factory(target: str) -> Callable[..., object]:
    """``pkg.module:attr`` -> the attribute (a Plugin class or a factory function)."""
    module, _, attr = target.partition(":")
    try:
        obj: object = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise PluginError(f"{target}: cannot import: {e}") from None
    if not callable(obj):
        raise PluginError(f"{target}: not callable")
    return obj
