"""The script's own modules under ``polyprof run`` (cli/run.py), as under ``python
script.py``: a module or package in the script's directory (``-m``: the current
directory), first on ``sys.path``, is what the script's ``import`` of that name gives,
even where polyprof had imported a module of that name before the script started
(``token``, ``uuid``, ``platform``, ``logging``, ``json``, ``copy``... come with
polyprof's own start; a program's ``token.py`` got the standard library's, and failed).

As the script starts, polyprof's modules of such a name (with their submodules) are taken
out of ``sys.modules``: polyprof's code keeps its references to them, and the script's
``import`` finds its own file. After the script, polyprof's are back for polyprof's own
work (the stop, the save and the summary import lazily; a module of the script's
directory that it imported is out of the way then too), and the script's again after that,
for its threads and ``atexit`` callbacks (the ``polyprof`` command); called in a program
(``cli.main()``), polyprof's stay back.

What a file there does not shadow under ``python`` either stays: the modules python's
own start-up imported (``os``, ``io``, ``site``, what ``.pth`` files import: those before
polyprof's first in ``sys.modules``, which keeps the order imports complete in), builtin
and frozen modules (found before ``sys.path``), a directory without ``__init__.py``
(a namespace portion: python takes the standard library's), a module loaded from that
very file, and polyprof itself (the script's ``polyprof.section`` is the session's).
Nor what polyprof's recording imports by name while the script runs
(:data:`RECORDING_USES`, NumPy): a warning names the script's file then.
The cost where nothing is shadowed: one listing of the directory (python's first import
from it lists it too).
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from importlib.machinery import FrozenImporter, PathFinder
from types import ModuleType
from typing import Iterator

log = logging.getLogger("polyprof")

#: never the script's: the session's own package
_OURS = "polyprof"
#: what polyprof's recording imports by name while the script runs (collect/: the journal's
#: and the recorder's ``import numpy``, NumPy's compiled code its own submodules; the
#: first ``step()``'s ``import opcode``; a native plugin's ``import ctypes``): a file of
#: the script's of such a name would break the recording, so polyprof's stay, and a
#: warning says so
RECORDING_USES = frozenset(("numpy", "opcode", "ctypes"))


class Shadowed:
    """polyprof's modules that the script's directory shadows, taken out of ``sys.modules``
    as the script starts, and the names of the directory's other modules."""

    def __init__(self, directory: str, polyprofs: dict[str, ModuleType], others: frozenset[str]) -> None:
        self.directory = directory
        self.polyprofs = polyprofs  # name -> polyprof's module (top-level names and their submodules)
        self.tops = frozenset(n for n in polyprofs if "." not in n)
        self.others = others  # the directory's names that no module in sys.modules had as the script started

    def restore(self) -> None:
        """polyprof's modules back for good (the script's of those names let go)."""
        _take(self.tops)
        sys.modules.update(self.polyprofs)

    @contextmanager
    def polyprofs_back(self) -> Iterator[None]:
        """polyprof's modules while polyprof works after the script: those taken, and none
        of the script's own from its directory (a ``base64.py`` it imported: the save's
        ``base64`` is the standard library's); the script's back after."""
        tops = self.tops | frozenset(n for n in self.others if _loaded_from(n, self.directory))
        if not tops:
            yield
            return
        script = _take(tops)
        sys.modules.update(self.polyprofs)
        try:
            yield
        finally:
            _take(tops)
            sys.modules.update(script)


#: what :func:`take_out` took for the script that runs now (read after it by cli/run.py)
_current: list[Shadowed] = []


def take_out(directory: str) -> Shadowed | None:
    """Take polyprof's modules that a module or package in ``directory`` (the script's
    first ``sys.path`` entry) shadows out of ``sys.modules``; what was taken (None: the
    directory cannot be listed)."""
    _current.clear()
    try:
        listed = os.listdir(directory)
    except OSError:  # gone, or unreadable: python's import finds nothing there either
        return None
    # 'token.py', 'token.cpython-311-x86_64-linux-gnu.so', 'logging' (a package's directory)
    names = {entry.partition(".")[0] for entry in listed} - {"", _OURS}
    loaded = [n for n in names if n in sys.modules]
    if loaded:
        python_had = _before_polyprof()
        loaded = [n for n in loaded if n not in python_had and _given(n, _shadowing(n, directory))]
    taken = Shadowed(directory, _take(frozenset(loaded)), frozenset(n for n in names if n not in sys.modules))
    _current.append(taken)
    return taken


def current() -> Shadowed | None:
    """What :func:`take_out` took for the last script run (None: nothing)."""
    return _current[-1] if _current else None


def _shadowing(name: str, directory: str) -> str | None:
    """The file in ``directory`` that python's ``import name`` would find (had ``name`` not
    been imported) rather than the module in ``sys.modules``; None: none."""
    if name in sys.builtin_module_names or FrozenImporter.find_spec(name) is not None:
        return None  # (builtin and frozen modules are found before sys.path)
    try:
        spec = PathFinder.find_spec(name, [directory])
    except (ImportError, ValueError, OSError):
        return None
    if spec is None or spec.loader is None or not spec.has_location or spec.origin is None:
        return None  # a namespace portion: python goes on along sys.path
    loaded = getattr(sys.modules.get(name), "__spec__", None)
    return None if getattr(loaded, "origin", None) == spec.origin else spec.origin  # (loaded from that very file)


def _given(name: str, file: str | None) -> bool:
    """Whether the script gets its own ``file`` for ``name``: not where polyprof's recording
    needs its own (:data:`RECORDING_USES`), which a warning says."""
    if file is None:
        return False
    if name not in RECORDING_USES:
        return True
    log.warning("%s: the script's own %s is not what its `import %s` gives under polyprof run: polyprof's "
                "recording uses the installed %s while the script runs (python would give the script's; "
                "rename it)", file, name, name, name)
    return False


def _before_polyprof() -> set[str]:
    """The modules imported before polyprof's first (python's start-up's, the command
    line's own): ``sys.modules`` holds them first, in the order their imports completed."""
    out = set()
    for name in list(sys.modules):
        if name == _OURS or name.startswith(_OURS + "."):
            break
        out.add(name)
    return out


def _take(tops: frozenset[str]) -> dict[str, ModuleType]:
    """The modules named ``tops`` and their submodules, taken out of ``sys.modules``."""
    if not tops:
        return {}
    names = [n for n in list(sys.modules) if n.partition(".")[0] in tops]
    return {n: m for n in names if (m := sys.modules.pop(n, None)) is not None}


def _loaded_from(name: str, directory: str) -> bool:
    """Whether the module ``name`` in ``sys.modules`` is a file, or a package, of ``directory``."""
    file = getattr(sys.modules.get(name), "__file__", None)
    if not isinstance(file, str):
        return False
    parent = os.path.dirname(file)
    if os.path.basename(file).startswith("__init__."):
        parent = os.path.dirname(parent)
    return parent == directory
