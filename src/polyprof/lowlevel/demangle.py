"""C++ symbols as C++ writes them, through the C++ runtime's ``__cxa_demangle`` (ctypes).

Kernel names reach polyprof mangled (``_Z9addKernelPiPKiS1_``) from CUPTI's records (the
cupti plugin) and from files that keep them as recorded (nvprof's); Kineto, Nsight and
nvprof's own output show them demangled (``addKernel(int*, int const*, int const*)``).
The plugin calls :func:`demangle` (the running program's own names), once per distinct
name (cached). Readers call :func:`demangle_all` with a file's names: a name's
substitutions can repeat what they refer to, doubling the text at each of a few
characters' levels (240 characters of a crafted RPD name: 889 MB and 28 s), so names
longer than :data:`IN_PROCESS` are demangled in one child process bounded in memory and
time, and those it cannot demangle within the bounds stay as given.

The runtime is opened by its usual names first (``libstdc++.so.6``, libc++), and only
where none loads by ``ctypes.util.find_library``, which runs ``ldconfig -p`` in a
subprocess (``libc.py`` says what that costs). Without a C++ runtime names stay as given.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import subprocess
import sys
from typing import Any, Sequence

from .libc import libc

#: longer names stay as given: the runtime's demangler recurses per nesting level, and a
#: hostile file's name must not exhaust the stack (real kernel names: under 2,000 characters)
MAX_MANGLED = 8192
#: a file's names up to this long are demangled in this process: a crafted name's text
#: doubles about every 10 characters (210 characters: 35 MB); 128 gave at most 443 KB (a review)
IN_PROCESS = 128
#: the child process that demangles a file's longer names: its address space, its time
#: for them all, and the longest text kept (a real demangled kernel name: a few KB)
CHILD_BYTES = 1 << 29
CHILD_SECONDS = 30.0
MAX_TEXT = 1 << 16

log = logging.getLogger("polyprof")
#: the C++ runtimes' names, as ``dlopen`` finds them without a search (Linux, macOS)
_RUNTIMES = ("libstdc++.so.6", "libc++.so.1", "libc++abi.so.1", "libc++.1.dylib", "libc++abi.dylib")


def _symbol(name: str | None) -> Any:  # -> the library's __cxa_demangle, or None
    try:
        return ctypes.CDLL(name).__cxa_demangle
    except (OSError, AttributeError, TypeError):  # TypeError: no CDLL(None) (Windows)
        return None


@functools.lru_cache(maxsize=1)
def _runtime() -> tuple[Any, str | None]:
    """(the C++ runtime's __cxa_demangle, a ctypes function, or None; the library's name
    it came from, None: the process itself)."""
    found = next(((f, n) for f, n in ((_symbol(n), n) for n in (None, *_RUNTIMES)) if f is not None), None)
    if found is None:
        from ctypes.util import find_library  # runs ldconfig: only when no usual name loaded

        found = next(((f, p) for f, p in ((_symbol(p), p) for p in map(find_library, ("stdc++", "c++")) if p)
                      if f is not None), None)
    return found if found is not None else (None, None)


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> Any:  # -> the C++ runtime's __cxa_demangle (a ctypes function), or None
    fn = _runtime()[0]
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


def demangle_all(names: Sequence[str]) -> list[str]:
    """:func:`demangle` of each of ``names`` read from a file: those longer than
    :data:`IN_PROCESS` in child processes (at most :data:`CHILD_NAMES` names each) within
    :data:`CHILD_BYTES` and :data:`CHILD_SECONDS`; a name demangled past :data:`MAX_TEXT`,
    or not within the bounds, stays as given (the latter logged, once)."""
    out = list(names)
    far = [i for i, n in enumerate(names) if len(n) > IN_PROCESS and n.startswith("_Z")
           and len(n) <= MAX_MANGLED and "\0" not in n]
    skip = set(far)
    for i, n in enumerate(names):
        if i not in skip:
            out[i] = demangle(n)
    if not far or not available():
        return out
    why: list[str] = []
    left = 0
    for at in range(0, len(far), CHILD_NAMES):
        part = far[at:at + CHILD_NAMES]
        before = len(why)
        for i, text in zip(part, _in_child([names[i] for i in part], why)):
            out[i] = text or names[i]
        left += len(part) if len(why) > before else 0
    if why:
        log.warning("%d of %d long C++ names are left mangled: %s", left, len(far), why[0])
    return out


#: long names demangled by one child process at most
CHILD_NAMES = 2000
#: the child: the C++ runtime's __cxa_demangle (from the library the parent found it in)
#: under an address-space limit where the system has one; names in as JSON on stdin,
#: texts out (None: not demangled) as JSON on stdout
_CHILD = r"""
import ctypes, json, sys
limit, most, lib = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] or None
try:
    import resource
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard < 0 else min(limit, hard), hard))
except (ImportError, ValueError, OSError):
    pass  # no such limit here: the parent's time limit still bounds the child
fn = ctypes.CDLL(lib).__cxa_demangle
fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
libc = ctypes.CDLL(None)
free, strlen = libc.free, libc.strlen
free.argtypes, strlen.argtypes, strlen.restype = [ctypes.c_void_p], [ctypes.c_void_p], ctypes.c_size_t
out = []
for name in json.load(sys.stdin):
    status = ctypes.c_int(0)
    p = fn(name.encode(), None, None, ctypes.byref(status))
    text = None
    if p:
        if status.value == 0 and strlen(p) <= most:
            text = ctypes.string_at(p).decode("utf-8", "replace")
        free(p)
    out.append(text)
json.dump(out, sys.stdout)
"""


def _in_child(names: list[str], why: list[str]) -> list[str | None]:
    """The texts of ``names`` demangled by :data:`_CHILD` (None each where it failed;
    ``why`` then gets the reason)."""
    none: list[str | None] = [None] * len(names)
    if getattr(sys, "frozen", False) or not sys.executable:
        why.append("no Python interpreter to demangle them apart from this process")
        return none
    try:
        r = subprocess.run([sys.executable, "-I", "-c", _CHILD, str(CHILD_BYTES), str(MAX_TEXT), _runtime()[1] or ""],
                           input=json.dumps(names), capture_output=True, text=True, timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        why.append(f"demangling them took over {CHILD_SECONDS:.0f} s")
        return none
    except OSError as e:
        why.append(f"the process to demangle them did not start ({e.strerror or e})")
        return none
    try:
        got = json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        got = None
    if not isinstance(got, list) or len(got) != len(names):
        tail = (r.stderr.strip().splitlines() or [""])[-1][:200]
        why.append(f"demangling them passed {CHILD_BYTES >> 20} MiB or failed ({tail or f'exit {r.returncode}'})")
        return none
    return [g if isinstance(g, str) else None for g in got]
