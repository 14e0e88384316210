"""Entry points of the installed distributions, read without importlib.metadata: how
another pip package extends polyprof.

Groups: ``polyprof.plugins`` (device plugins, ``collect/registry.py``),
``polyprof.formats`` (a ``Format`` of ``formats/registry.py``), ``polyprof.analyses``
(an ``Analysis`` of ``analyze/registry.py``) and ``polyprof.findings`` (a rule
``(trace, t) -> list[Finding]``; docs/plugins.md, "Readers, analyses and findings from
another package").

:func:`entry_points` scans the ``*.dist-info`` / ``*.egg-info`` directories on
``sys.path`` on each call (plugin discovery; its speed matters to every ``polyprof
run``: docs/benchmarks.md). :func:`declared` answers the extension groups once per
process from one pass over every ``polyprof.*`` group, and keeps what each directory
on ``sys.path`` declares in a small file of the user's cache, checked against the
directory's modification time: a summary then pays a few ``stat`` calls, not a listing
of site-packages and a ``stat`` of each distribution (pip installing or removing a
package changes its directory's time; an ``entry_points.txt`` edited by hand in place
does not: ``POLYPROF_ENTRY_POINT_CACHE=0`` reads the directories every time).

:func:`load` imports each entry point of a group; one that cannot be imported, raises,
gives the wrong type or takes a name already taken is skipped with one warning naming
its distribution and entry point, and listed in :data:`SKIPPED`.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Callable, Collection, Iterator, NamedTuple, TypeVar

from .errors import one_line

log = logging.getLogger("polyprof")

#: the groups :func:`declared` answers from its index (any ``polyprof.*`` group is indexed)
EXTENSION_GROUPS = ("polyprof.formats", "polyprof.analyses", "polyprof.findings")
_PREFIX = "polyprof."
#: ``0``: no cache file, every process reads the directories on ``sys.path``
ENV_CACHE = "POLYPROF_ENTRY_POINT_CACHE"


class EntryPoint(NamedTuple):
    """One entry point: ``name = module:attr`` of the distribution ``dist``."""

    name: str
    value: str
    dist: str = ""

    def load(self) -> object:
        """What the entry point names: a module, or an attribute of one."""
        module, _, attr = self.value.partition("[")[0].partition(":")
        obj: object = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj

    def describe(self, group: str) -> str:
        return f"{group} entry point {self.name!r} of {self.dist or 'an unnamed distribution'} ({self.value})"


def entry_points(group: str) -> list[EntryPoint]:
    """What ``importlib.metadata.entry_points(group=group)`` gives, in its order: the
    first distribution of a (normalised) name on ``sys.path`` wins.

    Read straight from the ``*.dist-info`` and ``*.egg-info`` directories on
    ``sys.path``, and only the ``entry_points.txt`` files that name the group are
    parsed: importing importlib.metadata and parsing every installed distribution's
    entry points was a large part of each ``polyprof run``'s start (docs/benchmarks.md). Anything else that can hold
    distributions (a zip or egg on ``sys.path``, another finder) goes through
    importlib.metadata. tests/test_registries.py compares the two."""
    found = _scan(group)
    return _from_metadata(group) if found is None else found


def _from_metadata(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points as from_metadata

    out = []
    for ep in from_metadata(group=group):
        dist = getattr(ep, "dist", None)
        out.append(EntryPoint(ep.name, ep.value, str(getattr(dist, "name", "") or "")))
    return out


def _scan(group: str) -> list[EntryPoint] | None:
    """The group's entry points read from the directories; None where only
    importlib.metadata can tell (a zip, an egg, another finder)."""
    if _other_finders():
        return None
    header, seen = f"[{group}]".encode(), set()
    out: list[EntryPoint] = []
    for root, child, name in _distributions():
        if root is None:
            return None
        if name in seen:
            continue
        seen.add(name)
        data = _read(os.path.join(root, child, "entry_points.txt"))
        if data is None:  # none, or an egg-info file (no directory)
            continue
        if header in data:
            out.extend(_parse(data.decode("utf-8", "replace"), group, _display(child)))
    return out


def _other_finders() -> bool:
    from importlib.machinery import PathFinder

    return any(f is not PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path)


def _read(path: str) -> bytes | None:
    """The file's bytes; None if it cannot be read. Most distributions have no
    entry_points.txt: ``os.access`` says so without an exception, and the file objects
    of ``open`` cost more than ``os.read`` (every run reads some fifty files)."""
    if not os.access(path, os.R_OK):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _distributions() -> Iterator[tuple[str | None, str, str]]:
    """(directory, child, normalised name) of each distribution's metadata on
    ``sys.path``; (None, ...) for a path entry only importlib.metadata reads."""
    for entry in sys.path:
        root = entry or "."
        if not os.path.isdir(root):
            if os.path.exists(root):  # a zip file
                yield None, "", ""
            continue
        if root.lower().endswith(".egg"):
            yield None, "", ""
        yield from _in_directory(root)


def _in_directory(root: str) -> Iterator[tuple[str, str, str]]:
    try:
        children = os.listdir(root)
    except OSError:
        return
    for child in children:
        low = child.lower()
        if low.endswith((".dist-info", ".egg-info")):  # the name as importlib.metadata normalises it
            yield root, child, _normalise(low.rpartition(".")[0].partition("-")[0])


def _display(child: str) -> str:
    """A distribution's name as its metadata directory spells it (``Acme_Tools``)."""
    return child.rpartition(".")[0].partition("-")[0]


def _normalise(name: str) -> str:
    """``re.sub(r"[-_.]+", "_", name)`` for a name without "-" (the version's
    separator), in string operations: a few µs less for each installed distribution."""
    name = name.replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


def _parse(text: str, group: str, dist: str = "") -> Iterator[EntryPoint]:
    """The ``name = value`` pairs of ``[group]`` in an entry_points.txt."""
    for g, ep in _sections(text, dist):
        if g == group:
            yield ep


def _sections(text: str, dist: str) -> Iterator[tuple[str, EntryPoint]]:
    """(group, entry point) of every ``name = value`` line of an entry_points.txt."""
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section is not None and "=" in line:
            name, value = line.split("=", 1)
            yield section, EntryPoint(name.strip(), value.strip(), dist)


# ------------------------------------------------------------------ the extension groups, once per process
_declared: dict[str, list[EntryPoint]] | None = None


def declared(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` (one of :data:`EXTENSION_GROUPS`), as
    :func:`entry_points` gives them, found once per process for every group together."""
    global _declared
    if _declared is None:
        _declared = _index()
    return list(_declared.get(group, ()))


def _index() -> dict[str, list[EntryPoint]]:
    """Every ``polyprof.*`` group's entry points: the first distribution of a name on
    ``sys.path`` wins, as in :func:`_scan`."""
    roots = _roots()
    if roots is None:
        return {g: _from_metadata(g) for g in EXTENSION_GROUPS}
    listed = _directories(roots)
    out: dict[str, list[EntryPoint]] = {}
    seen: set[str] = set()
    for root in roots:
        for name, groups in listed[root]:
            if name in seen:
                continue
            seen.add(name)
            for g, ep in groups:
                out.setdefault(g, []).append(ep)
    return out


def _roots() -> list[str] | None:
    """The directories on ``sys.path`` in order; None where importlib.metadata must be asked."""
    if _other_finders():
        return None
    roots = []
    for entry in sys.path:
        root = entry or "."
        if not os.path.isdir(root):
            if os.path.exists(root):  # a zip file
                return None
            continue
        if root.lower().endswith(".egg"):
            return None
        roots.append(root)
    return roots


Listing = list[tuple[str, list[tuple[str, EntryPoint]]]]


def _list_directory(root: str) -> Listing:
    """(normalised name, its ``polyprof.*`` entry points) of each distribution in ``root``
    in listing order (every one: an earlier one shadows a later one of its name)."""
    out: Listing = []
    header = f"[{_PREFIX}".encode()
    for _, child, name in _in_directory(root):
        data = _read(os.path.join(root, child, "entry_points.txt"))
        eps = []
        if data is not None and header in data:
            eps = [(g, ep) for g, ep in _sections(data.decode("utf-8", "replace"), _display(child))
                   if g.startswith(_PREFIX)]
        out.append((name, eps))
    return out


# ------------------------------------------------------------------ the cache file
_CACHE_NAME = "entry-points-v1.txt"
#: a directory changed less than this long ago is read but not kept (a file system's
#: times may be as coarse as this: a change in the same tick would go unseen)
_SETTLE_NS = 2_000_000_000
#: directories kept in the file (those of the latest process first)
_CACHE_DIRS = 64


def _directories(roots: list[str]) -> dict[str, Listing]:
    """:func:`_list_directory` of each root, from the cache file where the directory's
    modification time is the one recorded there."""
    use = os.environ.get(ENV_CACHE, "1") not in ("0", "") and _cache_file() is not None
    cached = _load_cache() if use else {}
    out: dict[str, Listing] = {}
    fresh: dict[str, tuple[int, Listing]] = {}
    now = time.time_ns()
    for root in roots:
        key = os.path.abspath(root)
        try:
            mtime = os.stat(root).st_mtime_ns
        except OSError:
            out[root] = []
            continue
        hit = cached.get(key)
        if hit is not None and hit[0] == mtime:
            out[root] = hit[1]
            continue
        out[root] = _list_directory(root)
        if now - mtime > _SETTLE_NS and _storable(key, out[root]):
            fresh[key] = (mtime, out[root])
    if use and fresh:
        kept = dict(fresh)
        for key in map(os.path.abspath, roots):
            if key in cached and key not in kept:
                kept[key] = cached[key]
        for key, value in cached.items():
            if len(kept) >= _CACHE_DIRS:
                break
            kept.setdefault(key, value)
        _save_cache(kept)
    return out


def _cache_file() -> str | None:
    """The cache file; None where there is no home to keep it in (no $HOME, a user the
    system does not know: ``~`` stays ``~``, a directory of that name in the working
    directory). A relative $XDG_CACHE_HOME is ignored, as the XDG spec says."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "polyprof", _CACHE_NAME) if os.path.isabs(base) else None


def _storable(key: str, listing: Listing) -> bool:
    texts = [key] + [t for _, eps in listing for g, ep in eps for t in (g, *ep)]
    return not any("\t" in t or "\n" in t or "\r" in t for t in texts)


def _load_cache() -> dict[str, tuple[int, Listing]]:
    """root -> (its modification time, its listing), as the file holds them ({}: none, or
    a file this code cannot read: it is written again)."""
    path = _cache_file()
    data = None if path is None else _read(path)
    out: dict[str, tuple[int, Listing]] = {}
    if data is None:
        return out
    listing: Listing = []
    try:
        for line in data.decode("utf-8").split("\n"):
            kind, _, rest = line.partition("\t")
            if kind == "N":
                listing.append((rest, []))
            elif kind == "E":
                g, name, value, dist = rest.split("\t")
                listing[-1][1].append((g, EntryPoint(name, value, dist)))
            elif kind == "D":
                mtime, _, root = rest.partition("\t")
                listing = []
                out[root] = (int(mtime), listing)
    except (ValueError, IndexError, UnicodeDecodeError):
        return {}
    return out


def _save_cache(dirs: dict[str, tuple[int, Listing]]) -> None:
    lines = []
    for root, (mtime, listing) in dirs.items():
        lines.append(f"D\t{mtime}\t{root}")
        for name, eps in listing:
            lines.append(f"N\t{name}")
            lines.extend(f"E\t{g}\t{ep.name}\t{ep.value}\t{ep.dist}" for g, ep in eps)
    path = _cache_file()
    if path is None:
        return
    tmp = ""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # a name no other writer has (the same pid on another host sharing the home)
        fd, tmp = tempfile.mkstemp(prefix=_CACHE_NAME + ".", suffix=".tmp", dir=os.path.dirname(path))
        with open(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except OSError as e:  # a read-only home: every process reads the directories
        log.debug("entry point cache %s not written: %s", path, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass


# ------------------------------------------------------------------ loading, each entry point on its own
#: (group, entry point, why) of each entry point :func:`load` skipped in this process
SKIPPED: list[tuple[str, EntryPoint, str]] = []
#: (group, entry point, the name it is known by) of each one :func:`load` gave
LOADED: list[tuple[str, EntryPoint, str]] = []

T = TypeVar("T")


class ExtensionError(Exception):
    """What is wrong with what an entry point names (the check of :func:`load`)."""


def load(group: str, check: Callable[[object, EntryPoint], T], name: Callable[[EntryPoint, T], str],
         taken: Collection[str]) -> list[tuple[EntryPoint, T]]:
    """Each entry point of ``group`` imported and made what the group holds by ``check``
    (which raises :class:`ExtensionError` saying what is wrong), in order; one that
    cannot be, or whose ``name`` is in ``taken`` or came before, is skipped with one
    warning naming its distribution and entry point. Never raises for an entry point."""
    out: list[tuple[EntryPoint, T]] = []
    names: set[str] = set()
    for ep in declared(group):
        why = _why_not(ep, check)
        if isinstance(why, str):
            skip(group, ep, why)
            continue
        own = name(ep, why)
        if own in taken or own in names:
            skip(group, ep, f"the name {own!r} is taken by "
                 + ("a built-in one" if own in taken else "an earlier entry point"))
            continue
        names.add(own)
        out.append((ep, why))
        LOADED.append((group, ep, own))
    return out


_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: object = None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """What another package's code prints goes to stderr while it runs: polyprof's stdout
    (``--json``, ``--csv``) stays what polyprof writes. Counted, not stacked: calls that
    overlap on several threads (``polyprof.load`` on two files at once) give stdout back
    once the last one ends (``contextlib.redirect_stdout`` there could leave it stderr)."""
    global _quiet_depth, _quiet_saved
    with _quiet_lock:
        if not _quiet_depth:
            _quiet_saved, sys.stdout = sys.stdout, sys.stderr
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if not _quiet_depth:
                if sys.stdout is sys.stderr:  # not one the code set meanwhile
                    sys.stdout = _quiet_saved  # type: ignore[assignment]
                _quiet_saved = None


def _why_not(ep: EntryPoint, check: Callable[[object, EntryPoint], T]) -> T | str:
    """What ``check`` makes of the entry point's object, or why it cannot."""
    with quiet():
        return _checked(ep, check)


def _checked(ep: EntryPoint, check: Callable[[object, EntryPoint], T]) -> T | str:
    try:
        obj = ep.load()
    except (Exception, SystemExit) as e:  # a vendor's import must not stop the command
        return f"cannot import it ({type(e).__name__}: {one_line(e)})"
    try:
        return check(obj, ep)
    except ExtensionError as e:
        return str(e)
    except (Exception, SystemExit) as e:
        return f"it raised {type(e).__name__}: {one_line(e)}"


def a_type(obj: object) -> str:
    """``obj``'s type with its article, for what an entry point gave: "an int", "a str"."""
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def skip(group: str, ep: EntryPoint, why: str) -> None:
    """One warning for an entry point that is not used, and its line in :data:`SKIPPED`."""
    SKIPPED.append((group, ep, why))
    log.warning("%s skipped: %s", ep.describe(group), why)
