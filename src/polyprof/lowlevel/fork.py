"""What a forked child does with the state it copied from its parent (see the package doc)."""

from __future__ import annotations

import os
from typing import Callable


def in_child(fn: Callable[[], None]) -> None:
    """Call ``fn`` in every child this process forks, right after the fork (where the
    platform can fork): the child has copies of the parent's objects but none of its
    other threads, so a session or a server there must forget or disarm what it copied."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=fn)
