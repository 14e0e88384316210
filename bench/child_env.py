"""The environment of a benchmark's child interpreters: imports as an installed package.

``pip install`` compiles every module to bytecode; a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` (set on some CI and sandbox machines) compiles polyprof's
modules from source in every fresh child instead, and the reader is imported lazily
inside ``polyprof.load`` (26 ms of a V100 load). HTA, installed by pip, never pays that.
So children may write bytecode, to a cache outside the tree, and each benchmark runs
one untimed warm-up child per tool first.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PYCACHE = Path(tempfile.gettempdir()) / "polyprof-bench-pycache"


def child_env(pythonpath: str | None = None, **extra: str) -> dict[str, str]:
    """``os.environ`` with bytecode caching on (in :data:`PYCACHE`) and ``PYTHONPATH``
    set to ``pythonpath`` (None: removed)."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(PYCACHE), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env
