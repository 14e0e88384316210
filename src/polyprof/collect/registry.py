"""Plugin discovery through the entry-point group ``polyprof.plugins``, plus native
plugins (shared libraries) listed by ``POLYPROF_PLUGIN_PATH``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable

from ..errors import PluginError
from .plugin import Availability

log = logging.getLogger("polyprof")
GROUP = "polyprof.plugins"


@dataclass
class PluginInfo:
    name: str
    target: str  # "module:attr"
    factory: Callable[..., Any] | None
    availability: Availability
    default: bool


def _load_entry(ep: Any) -> PluginInfo:
    from .signals import SavedDispositions

    # probing loads device runtimes (PoCL/LLVM install SIGSEGV/SIGBUS/... handlers):
    # the program keeps the signal dispositions it had
    with SavedDispositions():
        return _probe(ep)


def _probe(ep: Any) -> PluginInfo:
    try:
        factory = ep.load()
    except Exception as e:  # an uninstallable plugin must not break discovery
        return PluginInfo(ep.name, ep.value, None, Availability(False, f"cannot import: {e}"), False)
    try:
        avail = factory.availability() if hasattr(factory, "availability") else Availability(True)
    except Exception as e:
        avail = Availability(False, f"availability check failed: {e}")
    return PluginInfo(ep.name, ep.value, factory, avail, bool(getattr(factory, "default", True)))


def discover() -> dict[str, PluginInfo]:
    """Every plugin registered by any installed package, by name."""
    found: dict[str, PluginInfo] = {}
    for ep in entry_points(group=GROUP):
        if ep.name not in found:
            found[ep.name] = _load_entry(ep)
    from .native import path_plugins  # POLYPROF_PLUGIN_PATH: native .so plugins

    try:
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
    found = discover()
    if names is None:
        return [p for p in found.values() if p.default and p.availability.ok]
    out = []
    for n in names:
        if n not in found:
            raise PluginError(f"no plugin named {n!r}; installed: {', '.join(sorted(found)) or 'none'}")
        out.append(found[n])
    return out
