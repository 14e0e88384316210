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
    own = _named(folder, name, (".c", ".h"))
    return own and own + _named(Path(__file__).parent, "_shared_", (".h",))


def _named(folder: Path, prefix: str, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of ``folder`` named ``prefix*`` ending in one of ``suffixes``, sorted (a
    glob's matches, from one listing: every optional extension's import asks)."""
    return sorted(folder / n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(suffixes))


def digest(paths: list[Path]) -> str:
    """A hash of the files' names and bytes: what a stamp records."""
    import hashlib  # only where a stamp is compared (a checkout built in place), not at every start

    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def stale(module: ModuleType) -> bool:
    """Whether ``module`` was built from other sources than those beside it now (False
    where there is no stamp or no source to compare: a wheel, an older build)."""
    where = Path(module.__file__ or "")
    name = module.__name__.rpartition(".")[2]
    stamp = where.with_name(name + ".stamp")
    if not stamp.is_file():  # a wheel, or a build before stamps
        return False
    found = sources(where.parent, name)
    built = stamp.stat().st_mtime_ns
    if all(p.stat().st_mtime_ns < built for p in found):  # none touched since the build
        return False
    return stamp.read_text().strip() != digest(found)


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
