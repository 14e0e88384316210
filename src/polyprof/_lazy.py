"""Names a package imports on first use (a module ``__getattr__``, PEP 562).

Packages on the run path keep what a run does not need out of ``import polyprof``
(NumPy, pandas, the readers): their names resolve, and are kept in the package, the
first time they are asked for; so do their submodules (:func:`submodule`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``name`` is the attribute of that name of the
    module ``where[name]``, relative to the package ("traceset", "..xprof_names")."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            return submodule(package, name)
        value = getattr(importlib.import_module(module if module.startswith(".") else f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def submodule(package: str, name: str) -> Any:
    """The module ``package.name``, imported on first use, as the docs spell a function
    (``polyprof.formats.safety.override``, ``polyprof.analyze.critical_path.critical_path``
    after a plain ``import polyprof``); AttributeError where there is no such module."""
    full = f"{package}.{name}"
    if not name.startswith("_"):
        try:
            return importlib.import_module(full)  # (its import sets the package's attribute too)
        except ModuleNotFoundError as e:
            if e.name != full:
                raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
