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


def plugin_list(args: argparse.Namespace) -> list[str] | None:
    if not args.plugins:
        return None
    return [p.strip() for p in args.plugins.split(",") if p.strip()]


def load_trace(path: str) -> Trace:
    import os
    import sys

    from ..formats.detect import detect, load

    # a progress bar for big Kineto/Chrome JSON files when someone is watching
    if sys.stderr.isatty() and os.path.isfile(path) and os.path.getsize(path) > (16 << 20) \
            and detect(path) == "chrome-json":
        return load(path, progress=True)
    return load(path)


def print_summary(trace: Trace, **options: Any) -> None:
    from ..report.terminal import print_summary as show

    show(trace, **options)
