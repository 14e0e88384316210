"""C++ symbols as C++ writes them, through the C++ runtime's ``__cxa_demangle`` (ctypes).

Kernel names reach polyprof mangled (``_Z9addKernelPiPKiS1_``) from CUPTI's records (the
cupti plugin) and from files that keep them as recorded (nvprof's); Kineto, Nsight and
nvprof's own output show them demangled (``addKernel(int*, int const*, int const*)``).
Both readers and the plugin call :func:`demangle`, once per distinct name (cached).

The runtime is opened by its usual names first (``libstdc++.so.6``, libc++), and only
where none loads by ``ctypes.util.find_library``, which runs ``ldconfig -p`` in a
subprocess (``libc.py`` says what that costs). Without a C++ runtime names stay as given.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from .libc import libc

#: longer names stay as given: the runtime's demangler recurses per nesting level, and a
#: hostile file's name must not exhaust the stack (real kernel names: under 2,000 characters)
MAX_MANGLED = 8192
#: the C++ runtimes' names, as ``dlopen`` finds them without a search (Linux, macOS)
_RUNTIMES = ("libstdc++.so.6", "libc++.so.1", "libc++abi.so.1", "libc++.1.dylib", "libc++abi.dylib")


def _symbol(name: str | None) -> Any:  # -> the library's __cxa_demangle, or None
    try:
        return ctypes.CDLL(name).__cxa_demangle
    except (OSError, AttributeError, TypeError):  # TypeError: no CDLL(None) (Windows)
        return None


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> Any:  # -> the C++ runtime's __cxa_demangle (a ctypes function), or None
    fn = next((f for f in map(_symbol, (None, *_RUNTIMES)) if f is not None), None)
    if fn is None:
        from ctypes.util import find_library  # runs ldconfig: only when no usual name loaded

        fn = next((f for f in (_symbol(p) for p in map(find_library, ("stdc++", "c++")) if p) if f is not None),
                  None)
    if fn is None or libc("free") is None:
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return fn


@functools.lru_cache(maxsize=1)
def _free() -> Any:  # -> the C library's free (a ctypes function)
    lib = libc("free")
    assert lib is not None  # _cxa_demangle checked it
    fn = lib.free
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = None
    return fn


def available() -> bool:
    """Whether names can be demangled here (a C++ runtime with ``__cxa_demangle``)."""
    return _cxa_demangle() is not None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """A C++ symbol as C++ writes it (``_Z6kernelPfi`` -> ``kernel(float*, int)``), as
    Kineto and Nsight show kernel names; the name itself where it is not mangled, is not
    a valid mangled name, or no C++ runtime is there."""
    if not name.startswith("_Z") or "\0" in name or len(name) > MAX_MANGLED:
        return name
    fn = _cxa_demangle()
    if fn is None:
        return name
    try:
        raw = name.encode()
    except UnicodeEncodeError:  # a lone surrogate: no symbol
        return name
    status = ctypes.c_int(0)
    p = fn(raw, None, None, ctypes.byref(status))
    if not p:
        return name
    try:
        return ctypes.string_at(p).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        _free()(p)
