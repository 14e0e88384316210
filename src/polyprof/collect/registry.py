"""Where plugins come from, all of it: the entry-point group ``polyprof.plugins``, the
native libraries listed by ``POLYPROF_PLUGIN_PATH``, and the targets a user names
(``path.so``, ``pkg.module:Factory``, an installed name). collect/native.py only loads
and drives a native library; it does not look for plugins."""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from ..errors import PluginError
from .abi import ENV_PATH
from .plugin import Availability, Plugin

log = logging.getLogger("polyprof")
GROUP = "polyprof.plugins"


@dataclass
class PluginInfo:
    name: str
    target: str  # "module:attr"
    factory: Callable[..., Any] | None
    availability: Availability
    default: bool


def _load_entry(ep: Any, session: bool = False) -> PluginInfo:
    from .signals import SavedDispositions

    # probing loads device runtimes (PoCL/LLVM install SIGSEGV/SIGBUS/... handlers):
    # the program keeps the signal dispositions it had
    with SavedDispositions():
        return _probe(ep, session)


def _probe(ep: Any, session: bool = False) -> PluginInfo:
    try:
        factory = ep.load()
    except Exception as e:  # an uninstallable plugin must not break discovery
        return PluginInfo(ep.name, ep.value, None, Availability(False, f"cannot import: {e}"), False)
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
    found: dict[str, PluginInfo] = {}
    for ep in entry_points(group=GROUP):
        if ep.name not in found:
            found[ep.name] = _load_entry(ep, session)
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
        eps = {ep.name: ep for ep in entry_points(group=GROUP)}
        if all(n in eps for n in names):
            return [_load_entry(eps[n]) for n in names]
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


def path_plugins() -> list[Any]:
    """Registry entries for the libraries on POLYPROF_PLUGIN_PATH."""
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


def resolve_factory(target: str) -> Callable[..., Any]:
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


def load_target(target: str, **options: Any) -> Plugin:
    """A plugin object from ``path.so``, ``pkg.module:Factory`` or a registered name."""
    if is_library_path(target):
        from .native import load_native

        return load_native(target, **options)
    plugin = resolve_factory(target)(**options)
    if not isinstance(plugin, Plugin):
        raise PluginError(f"{target}: the factory returned {type(plugin).__name__}, not a polyprof Plugin")
    return plugin


def import_factory(target: str) -> Callable[..., Any]:
    """``pkg.module:attr`` -> the attribute (a Plugin class or a factory function)."""
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise PluginError(f"{target}: cannot import: {e}") from None
    if not callable(obj):
        raise PluginError(f"{target}: not callable")
    return obj
