"""Helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
from typing import Any

from ..trace.core import Trace


def add_plugin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugins", help="comma-separated plugins to use (default: every available one; "
                                     "see `polyprof plugins`)")
    p.add_argument("--collect-timeout", type=float, default=30.0, metavar="S",
                   help="time limit for each plugin's collect step (default 30 s)")
    p.add_argument("--plugin", action="append", default=[], metavar="TARGET",
                   help="also load this plugin: a native plugin library (path.so) or a factory "
                        "(pkg.module:Factory); repeatable")


def plugin_list(args: argparse.Namespace) -> list[Any] | None:
    """Plugin names for the session, plus plugin objects loaded from ``--plugin``."""
    extra = [load_target(t) for t in getattr(args, "plugin", None) or []]
    if not args.plugins:
        if not extra:
            return None
        return [*(info.name for info in resolve(None)), *extra]  # the defaults, and these
    return [*(p.strip() for p in args.plugins.split(",") if p.strip()), *extra]


def load_target(target: str) -> Any:
    from ..collect.native import load_target as load

    return load(target)


def resolve(names: list[str] | None) -> list[Any]:
    from ..collect.registry import resolve as res

    return res(names)


def load_trace(path: str) -> Trace:
    from ..formats.detect import load

    return load(path)


def print_summary(trace: Trace, **options: Any) -> None:
    from ..report.terminal import print_summary as show

    show(trace, **options)
