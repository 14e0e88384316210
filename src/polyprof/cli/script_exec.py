"""The script's code run as ``python`` runs it, under ``polyprof run`` (cli/run.py): runpy's
``exec`` of it made frameless (the script's frame at the bottom of its stack), or, without
the compiled module, the recursion limit raised by the launcher's frames beneath it; and
the script's ``__main__`` module kept for its threads and ``atexit`` callbacks.
"""

from __future__ import annotations

import builtins
import runpy
import sys
from contextlib import contextmanager
from types import CodeType, ModuleType
from typing import Iterator

from ..lowlevel import unseen

#: the script's ``__main__`` module (runpy's, which it takes out of sys.modules when the script returns)
_script_main: list[ModuleType] = []


def keep_script_main(ends: bool, module: bool = False) -> None:
    """Where the process ends after the script (``ends``: the ``polyprof`` command), the
    script's module is ``__main__`` again once it has returned, as under python to its
    end, for its threads and ``atexit`` callbacks: what they pickle by name
    (``__main__.Point``, a function given to a process pool), ``import __main__``; and,
    as python does once a script (not a ``-m`` module) has run, without its ``__file__``
    and ``__cached__``. (runpy puts polyprof's own ``__main__`` back as the script
    returns; ``cli.main()`` called in a program keeps the program's.)"""
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
    which ``run_path`` set to the absolute path it was given for ``__file__`` (``-m``:
    None, the module's path, as python's)."""
    run_code = unseen.exec_frameless or exec
    names = vars(runpy)

    def exec_once(code: CodeType, namespace: dict[str, object]) -> object:
        names.pop("exec", None)
        main = sys.modules.get("__main__")
        _script_main[:] = [main] if main is not None and vars(main) is namespace else []
        if argv0 is not None and sys.argv and sys.argv[0] == namespace.get("__file__"):
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
