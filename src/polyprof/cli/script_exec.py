"""The script's code run as ``python`` runs it, under ``polyprof run`` (cli/run.py): runpy's
``exec`` of it made frameless (the script's frame at the bottom of its stack), or, without
the compiled module, the recursion limit raised by the launcher's frames beneath it; and
the script's ``__main__`` module kept for its threads and ``atexit`` callbacks.
"""

from __future__ import annotations

import builtins
import os
import pkgutil
import runpy
import stat
import sys
from contextlib import contextmanager
from types import CodeType, ModuleType
from typing import Iterator

from ..lowlevel import unseen

#: the script's ``__main__`` module (runpy's, which it takes out of sys.modules when the script returns)
_script_main: list[ModuleType] = []


def application(path: str) -> bool:
    """Whether python runs ``path`` through the ``__main__.py`` inside it (a directory, a
    zip archive: ``python app/``, ``python app.pyz``) rather than as a script's code
    (a file, ``/dev/null``, a pipe): whether it has an importer, as runpy asks. Its
    ``sys.path[0]`` is then ``path`` itself, made absolute, not the directory around it."""
    return pkgutil.get_importer(os.path.abspath(path)) is not None


def unrunnable(path: str) -> tuple[str, int] | None:
    """Why ``python path`` would not start the program, and python's exit status for it
    (None: it would). Read before the session starts: nothing of the program runs here."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such script", 2
    except OSError as e:  # (a loop of links, a name too long: the open's error, as python's)
        return f"cannot open it ({e.strerror or e})", 2
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or _empty_device(path, mode)):
        return "not a file (a pipe or a device): runpy, which runs the script as python does, reads it " \
               "twice (for compiled code first, then its source): save the script to a file", 2
    importer = pkgutil.get_importer(os.path.abspath(path))
    if importer is None:  # a file's code (the open, where it fails, is the program's error, as python's)
        return _not_python(path) if stat.S_ISREG(mode) else None
    try:
        found = importer.find_spec("__main__") is not None  # (as runpy finds it: a directory's or archive's)
    except (ImportError, OSError, ValueError):
        found = False
    if found:
        return None
    kind = "directory" if os.path.isdir(path) else "zip archive"
    return f"a {kind} without a __main__.py: python runs a {kind} through its __main__.py (polyprof run " \
           "takes a script, such a directory or archive, or -m module)", 1


#: the second line of pip's launcher for a long interpreter path (``#!/bin/sh`` first):
#: a shell ``exec`` of python that is a string statement to Python
_PIP_SH_LAUNCHER = b"'''exec' "


def _not_python(path: str) -> tuple[str, int] | None:
    """Why the file at ``path`` is no Python program, where its first bytes say so: a
    ``#!`` line that runs another interpreter (a shell shim: pyenv's and asdf's
    ``torchrun`` run a shell that starts the real one), or a compiled executable. Python
    fails on either with a ``SyntaxError`` (status 1), here before the session begins.
    pip's launcher of a long interpreter path (:data:`_PIP_SH_LAUNCHER`) is Python."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:  # (the program's error, as python's)
        return None
    lines = head.split(b"\n", 2)
    if head.startswith(b"\x7fELF"):
        what = "a compiled executable"
    elif head.startswith(b"#!"):
        first = lines[0].decode("utf-8", "replace").strip()
        words = [os.path.basename(w) for w in first[2:].split() if not w.startswith("-") and "=" not in w]
        words = words[1:] if words[:1] == ["env"] else words
        if not words or "python" in words[0] or "pypy" in words[0] or lines[1:2] and \
                lines[1].startswith(_PIP_SH_LAUNCHER):
            return None
        what = f"a {words[0]} script (its first line: {first})"
    else:
        return None
    launcher = (" (torchrun: polyprof run -m torch.distributed.run ... runs its module, and records the "
                "launcher, not the ranks: docs/ranks.md)") if os.path.basename(path) == "torchrun" else ""
    return (f"not a Python program but {what}: polyprof run runs Python as python does, and python {path} "
            f"fails on it too; give the Python script, or -m MODULE{launcher}"), 1


def _empty_device(path: str, mode: int) -> bool:
    """Whether ``path`` is the null device (``/dev/null``: an empty program, read twice or not)."""
    try:
        return stat.S_ISCHR(mode) and os.path.samefile(path, os.devnull)
    except OSError:
        return False


def keep_script_main(ends: bool, module: bool = False) -> None:
    """Where the process ends after the script (``ends``: the ``polyprof`` command), the
    script's module is ``__main__`` again once it has returned, as under python to its
    end, for its threads and ``atexit`` callbacks: what they pickle by name
    (``__main__.Point``, a function given to a process pool), ``import __main__``; and,
    as python does once a script (not a ``-m`` module, nor an :func:`application`, which
    python runs as its ``__main__`` module) has run, without its ``__file__`` and
    ``__cached__``. (runpy puts polyprof's own ``__main__`` back as the script returns;
    ``cli.main()`` called in a program keeps the program's.)"""
    main = _script_main.pop() if _script_main else None
    if ends and main is not None:
        sys.modules["__main__"] = main
        if not module:
            for name in ("__file__", "__cached__"):
                vars(main).pop(name, None)


@contextmanager
def script_at_stack_bottom(argv0: str | None) -> Iterator[None]:
    """runpy runs the script as ``python`` would, and its ``exec`` of the script's code is
    ``lowlevel.unseen.exec_frameless``: the script's frame is the bottom of its stack, as
    under plain ``python``, so what walks the stack from the script — torch's
    ``with_stack`` tracer starting, ``traceback.print_stack``, ``sys._getframe`` — finds
    no frame of runpy or polyprof beneath it (without the compiled module the launcher's
    frames stay beneath). Only the first exec is: the script's own uses of runpy are
    plain. That exec also gives a script back its ``sys.argv[0]`` as typed (``argv0``),
    which ``run_path`` set to the absolute path it was given (the ``__file__`` of a
    script; an :func:`application`'s own path) (``-m``: None, the module's path, as python's)."""
    run_code = unseen.exec_frameless or exec
    names = vars(runpy)

    def exec_once(code: CodeType, namespace: dict[str, object]) -> object:
        names.pop("exec", None)
        main = sys.modules.get("__main__")
        _script_main[:] = [main] if main is not None and vars(main) is namespace else []
        if argv0 is not None and sys.argv and sys.argv[0] == os.path.abspath(argv0):
            sys.argv[0] = argv0
        # python's __main__ holds the builtins module (exec() would put its dict there:
        # ``__builtins__.name = ...`` raised AttributeError under polyprof run)
        namespace.setdefault("__builtins__", builtins)
        if unseen.exec_frameless is not None:  # it does not count the frames beneath either
            return run_code(code, namespace)
        with _depth_given_back():
            return run_code(code, namespace)

    names["exec"] = exec_once  # runpy's exec(code, run_globals), looked up in its globals
    try:
        yield
    finally:
        if names.get("exec") is exec_once:
            del names["exec"]


def _room(n: int = 0) -> int:
    """How many calls deeper than its caller's frame Python lets a program go."""
    try:
        return _room(n + 1)
    except RecursionError:
        return n


@contextmanager
def _depth_given_back() -> Iterator[None]:
    """Without the compiled ``exec_frameless``, the launcher's frames beneath the script
    count toward the recursion limit: the limit is raised by that many while the script
    runs (so a program that recurses as deep as python allows it still can; it reads the
    raised limit from ``sys.getrecursionlimit()``), and put back after it unless the
    program set its own. Measured, not counted: C calls beneath count too, by version."""
    limit = sys.getrecursionlimit()
    # python's script frame is at depth 1; the script's frame will be one deeper than
    # exec_once's, _room's three (exec_once, __enter__, this generator, _room)
    below = max(0, limit - 3 - _room())
    sys.setrecursionlimit(limit + below)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == limit + below:
            sys.setrecursionlimit(limit)
