"""polyprof's optional compiled modules, loaded by one rule.

Every C extension of polyprof is optional: ``optional(__package__, "_name")`` gives the
module, or None where its caller runs the Python path instead:

* ``POLYPROF_PURE_PYTHON=1``: the reference the tests hold the compiled paths to;
* not built (no C compiler at install time);
* built from other sources than those beside it: a checkout changed since its last
  ``python setup.py build_ext --inplace`` (or ``pip install -e .``). setup.py writes next
  to each extension a stamp of the sources it was built from (:func:`digest`); a module
  whose sources no longer match is not used, and a warning says to rebuild, instead of a
  stale module reading the new code's data wrongly. The sources are hashed only where one
  was modified since the stamp was written (make's rule: a tree untouched since its
  build costs one stat per file at start). An installed wheel has no sources beside its
  modules, so nothing is compared there.
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from types import ModuleType

log = logging.getLogger("polyprof")


def pure_python() -> bool:
    """Whether ``POLYPROF_PURE_PYTHON`` asks for the Python paths only."""
    return os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0")


def sources(folder: Path, name: str) -> list[Path]:
    """The C sources and headers an extension ``name`` is built from: ``name*.c`` and
    ``name*.h`` in its package's folder (``_walk.c``, ``_walk_parse.c``, ``_walk.h``, ...),
    then the headers every extension may include, ``lowlevel/_shared_*.h``. setup.py uses
    the same rule when it writes the stamp."""
    own = sorted(map(Path, _named(str(folder), name, (".c", ".h"))))
    return own and own + sorted(map(Path, _named(os.path.dirname(__file__), "_shared_", (".h",))))


def _named(folder: str, prefix: str, suffixes: tuple[str, ...]) -> list[str]:
    """The paths of the files of ``folder`` named ``prefix*`` ending in one of ``suffixes``
    (a glob's matches, from one listing, as plain strings: every optional extension's
    import asks, in a checkout)."""
    return [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(suffixes)]


def digest(paths: list[Path]) -> str:
    """A hash of the files' names and bytes: what a stamp records."""
    import hashlib  # only where a stamp is compared (a checkout built in place), not at every start

    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def stale(module: ModuleType) -> bool:
    """Whether ``module`` was built from other sources than those beside it now (False
    where there is no stamp or no source to compare: a wheel, an older build). The
    times are compared on plain paths (every optional extension's import asks, in a
    checkout); :func:`sources` only where one is newer than the stamp."""
    folder, _, _ = (module.__file__ or "").rpartition(os.sep)
    name = module.__name__.rpartition(".")[2]
    try:
        built = os.stat(os.path.join(folder, name + ".stamp")).st_mtime_ns
    except OSError:  # a wheel, or a build before stamps
        return False
    own = _named(folder, name, (".c", ".h"))
    if not own:
        return False
    every = own + _named(os.path.dirname(__file__), "_shared_", (".h",))
    if all(os.stat(p).st_mtime_ns < built for p in every):  # none touched since the build (sources' rule)
        return False
    found = sources(Path(folder), name)
    return Path(folder, name + ".stamp").read_text().strip() != digest(found)


def optional(package: str | None, name: str) -> ModuleType | None:
    """The compiled module ``package.name``, or None (the reasons in this module's text)."""
    if pure_python():
        return None
    try:
        module = importlib.import_module(f"{package}.{name}")
    except ImportError:
        return None
    if stale(module):
        log.warning("%s is older than its C sources (rebuild it: python setup.py build_ext --inplace); "
                    "using the Python path", module.__name__)
        return None
    return module
