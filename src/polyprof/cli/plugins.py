"""polyprof plugins: what is installed, and whether it can run here."""

from __future__ import annotations

import argparse
import os
from .common import Subparsers, console


def register(sub: Subparsers) -> None:
    what = ("list discovered plugins and whether each can run here, and the formats, analyses and finding "
            "rules other packages add")
    p = sub.add_parser("plugins", help=what, description=f"polyprof plugins: {what} (docs/plugins.md).")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from ..collect.registry import discover

    table = Table(title="polyprof plugins (entry-point group polyprof.plugins)")
    for col in ("plugin", "available", "default", "devices", "source / reason"):
        table.add_column(col)
    for name, info in sorted(discover().items()):
        kinds = ", ".join(getattr(info.factory, "device_kinds", ()) or ())
        table.add_row(name, "[green]yes[/]" if info.availability.ok else "[red]no[/]",
                      "yes" if info.default else "no", kinds,
                      # a reason is plain text: "pip install 'polyprof[cuda]'" is no markup
                      escape(info.target if info.availability.ok else info.availability.reason))
    out = console()  # (a closed pipe, | head: status 0)
    out.print(table)
    out.print(_extensions())
    out.print(_sections_line())
    return 0


def _extensions() -> object:
    """The formats, analyses and finding rules installed packages add (their entry-point
    groups), and those skipped, with why."""
    from rich.markup import escape
    from rich.table import Table

    from .. import entrypoints
    from ..analyze import registry as analyses
    from ..formats import registry as formats

    formats.extensions()
    analyses.extensions()
    analyses.extension_rules()
    kinds = {formats.GROUP: "format", analyses.GROUP: "analysis", analyses.FINDINGS_GROUP: "finding"}
    table = Table(title="extensions from other packages (entry-point groups " + ", ".join(kinds) + ")", box=None)
    for col in ("kind", "name", "distribution", "target / why skipped"):
        table.add_column(col)
    for group, ep, name in entrypoints.LOADED:
        table.add_row(kinds.get(group, group), escape(name), escape(ep.dist), escape(ep.value))
    for group, ep, why in entrypoints.SKIPPED:
        table.add_row(kinds.get(group, group), escape(ep.name), escape(ep.dist), "[red]skipped:[/] " + escape(why))
    if not table.rows:
        return "extensions from other packages: none (docs/plugins.md says how to add one)"
    return table


def _sections_line() -> str:
    """Which polyprof.section is in use: the fallback costs about twice as much per section."""
    from ..collect import recorder

    if recorder.IMPLEMENTATION == "c":
        return "sections: compiled (polyprof.collect._fastsection)"
    why = ("POLYPROF_PURE_PYTHON is set" if os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0")
           else "the C extension was not built")
    return f"sections: pure Python ({why})"
