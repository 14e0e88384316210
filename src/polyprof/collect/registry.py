"""Where plugins come from, all of it: the entry-point group ``polyprof.plugins``, the
native libraries listed by ``POLYPROF_PLUGIN_PATH``, and the targets a user names
(``path.so``, ``pkg.module:Factory``, an installed name). collect/native.py only loads
and drives a native library; it does not look for plugins."""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Callable, NamedTuple

# the scanner is polyprof/entrypoints.py (formats and analyses read their groups too);
# EntryPoint, _normalise and _scan stay importable from here
from ..entrypoints import EntryPoint as EntryPoint, _normalise as _normalise, _scan as _scan
from ..entrypoints import entry_points as _entry_points
from ..errors import PluginError
from .plugin import Availability, Plugin

log = logging.getLogger("polyprof")
GROUP = "polyprof.plugins"
#: native plugin libraries (files, or directories of ``*.so``), os.pathsep-separated
ENV_PATH = "POLYPROF_PLUGIN_PATH"


def entry_points(group: str = GROUP) -> list[EntryPoint]:
    """What ``importlib.metadata.entry_points(group=group)`` gives (``polyprof/entrypoints.py``)."""
    return _entry_points(group)


# Named tuples, not dataclasses: every `polyprof run` discovers plugins, and defining
# this one (and entrypoints.EntryPoint) as dataclasses is slower.
class PluginInfo(NamedTuple):
    """One plugin found: its name, where it comes from (``module:attr`` or a library
    path), its factory (None: it cannot be loaded), whether it can run here, and
    whether a session runs it unless told which plugins to use."""

    name: str
    target: str
    factory: Callable[..., object] | None
    availability: Availability
    default: bool


def _load_entries(eps: list[EntryPoint], session: bool = False) -> list[PluginInfo]:
    """Each plugin loaded and its availability checked."""
    from .signals import SavedDispositions

    # probing loads device runtimes (PoCL/LLVM install SIGSEGV/SIGBUS/... handlers):
    # the program keeps the signal dispositions it had (restored once, after all of them)
    with SavedDispositions():
        return [_probe(ep, session) for ep in eps]


def _probe(ep: EntryPoint, session: bool = False) -> PluginInfo:
    try:
        factory = ep.load()
    except Exception as e:  # an uninstallable plugin must not break discovery
        return PluginInfo(ep.name, ep.value, None, Availability(False, f"cannot import: {e}"), False)
    if not callable(factory):
        return PluginInfo(ep.name, ep.value, None, Availability(False, f"{ep.value} is not callable"), False)
    try:
        check = getattr(factory, "session_availability" if session else "availability", None)
        if check is None:
            check = getattr(factory, "availability", None)
        avail = check() if check is not None else Availability(True)
    except Exception as e:
        avail = Availability(False, f"availability check failed: {e}")
    return PluginInfo(ep.name, ep.value, factory, avail, bool(getattr(factory, "default", True)))


def discover(session: bool = False) -> dict[str, PluginInfo]:
    """Every plugin registered by any installed package, by name. ``session``: the
    availability a session checks before starting a plugin (``session_availability``,
    cheaper for plugins that start at an import), not the full check."""
    eps: dict[str, EntryPoint] = {}
    for ep in entry_points(GROUP):
        eps.setdefault(ep.name, ep)
    found = {info.name: info for info in _load_entries(list(eps.values()), session)}
    try:  # POLYPROF_PLUGIN_PATH: native .so plugins
        for info in path_plugins():
            found.setdefault(info.name, info)
    except Exception as e:  # a bad path entry must not break discovery
        log.warning("POLYPROF_PLUGIN_PATH: %s", e)
    return found


def resolve(names: list[str] | None) -> list[PluginInfo]:
    """The plugins a session runs: the named ones, or every available default one.

    Named plugins that are installed entry points are loaded alone: a session asking
    for ``["host"]`` never probes (imports, initialises) the other device runtimes."""
    if names is not None:
        eps: dict[str, EntryPoint] = {}
        for ep in entry_points(GROUP):
            eps.setdefault(ep.name, ep)
        if all(n in eps for n in names):
            return _load_entries([eps[n] for n in names])
    found = discover(session=names is None)
    if names is None:
        return [p for p in found.values() if p.default and p.availability.ok]
    out = []
    for n in names:
        if n not in found:
            raise PluginError(f"no plugin named {n!r}; installed: {', '.join(sorted(found)) or 'none'}")
        out.append(found[n])
    return out


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
    """The plugin factory named by ``pkg.module:Factory`` or an installed plugin name."""
    if ":" in target:
        return import_factory(target)
    found = discover()
    if target not in found:
        raise PluginError(f"{target!r} is not a .so file, a module:Factory, or an installed plugin "
                          f"(installed: {', '.join(sorted(found)) or 'none'})")
    info = found[target]
    if info.factory is None:
        raise PluginError(f"plugin {target!r} cannot be loaded: {info.availability.reason}")
    return info.factory


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
