"""The C library through ctypes, opened once per process, without running ldconfig.

``ctypes.util.find_library("c")`` runs ``ldconfig -p`` in a subprocess (and imports
subprocess first): about 5 ms of CPU where a summary of a small trace takes 0.1 s.
The process has libc loaded already, so its symbols are found through the process's
own namespace (``dlopen(NULL)``), else by libc's usual name; ``find_library`` only
where neither has the symbol asked for.
"""

from __future__ import annotations

import ctypes
import functools


@functools.lru_cache(maxsize=None)
def libc(symbol: str) -> ctypes.CDLL | None:
    """The first of the process's loaded symbols, ``libc.so.6`` and the C library
    ``find_library`` names that has ``symbol`` (opened with ``use_errno``); None where
    none has it (Windows, a C library without it)."""
    for name in (None, "libc.so.6", "find"):
        try:
            if name == "find":
                from ctypes.util import find_library  # runs ldconfig: only when the above failed

                name = find_library("c")
                if name is None:
                    return None
            lib = ctypes.CDLL(name, use_errno=True)
            getattr(lib, symbol)
            return lib
        except (OSError, AttributeError, TypeError):  # TypeError: no CDLL(None) (Windows)
            continue
    return None
