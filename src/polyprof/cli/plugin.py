"""polyprof plugin check: run the plugin contract's conformance kit against a plugin."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Iterator

from ..errors import PolyprofError
from .common import Subparsers, seconds


def register(sub: Subparsers) -> None:
    p = sub.add_parser("plugin", help="tools for plugin authors (conformance kit)",
                       description="Tools for plugin authors.")
    psub = p.add_subparsers(dest="plugin_command", metavar="ACTION")
    c = psub.add_parser("check", help="check a plugin against the plugin contract",
                        description="Run each clause of the plugin contract (lifecycle, double start, "
                                    "collect without start, collect twice, buffer too small, malformed "
                                    "XSpace, stop racing other threads, valid trace, time limits) and "
                                    "print pass/fail with the reason. Exit code 0 only if all pass.")
    c.add_argument("target", help="a native plugin (path.so), a factory (pkg.module:Factory) or the "
                                   "name of an installed plugin")
    c.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option for the plugin (value parsed as JSON when it can be); repeatable")
    c.add_argument("--start-limit", type=seconds, default=5.0, metavar="S", help="time limit of start() (5 s)")
    c.add_argument("--stop-limit", type=seconds, default=5.0, metavar="S", help="time limit of stop() (5 s)")
    c.add_argument("--collect-limit", type=seconds, default=30.0, metavar="S",
                   help="time limit of collect() (30 s)")
    c.add_argument("--activity", type=seconds, default=0.15, metavar="S",
                   help="how long the kit's workload runs while the plugin records (0.15 s)")
    c.add_argument("--workload", metavar="MODULE:FUNCTION",
                   help="what to run while the plugin records, called with the seconds to run "
                        "(default: the plugin's conformance_workload, else a section and NumPy work)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(func=run_check)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _options(items: list[str]) -> dict[str, Any]:
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PolyprofError(f"--option {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


@contextlib.contextmanager
def _prints_to_stderr() -> Iterator[None]:
    """While the kit drives a plugin, what it prints goes to stderr: Python's ``print``
    (``sys.stdout`` is stderr then: entrypoints.quiet) and C code writing to file
    descriptor 1 (pointed at stderr's file); stdout is the kit's report alone."""
    from ..entrypoints import quiet

    fd, saved = -1, -1
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
        saved = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
    except (AttributeError, OSError, ValueError):  # no file descriptor (a test's capture): Python's prints only
        fd = -1
    try:
        with quiet():
            yield
    finally:
        if saved >= 0:
            try:
                sys.stdout.flush()  # what was printed meanwhile goes where it was written: stderr
            except (OSError, ValueError):
                pass
            if fd >= 0:
                os.dup2(saved, fd)
            os.close(saved)


def run_check(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..collect.conformance import FAIL, NA, PASS, Limits, check

    limits = Limits(args.start_limit, args.stop_limit, args.collect_limit, args.activity)
    work = None
    with _prints_to_stderr():  # the report alone on stdout: --json is parsed (program_state says it printed)
        if args.workload:
            from ..collect.registry import import_factory

            work = import_factory(args.workload)
        report = check(args.target, options=_options(args.option), limits=limits, workload_fn=work)
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0 if report.ok else 1
    style = {PASS: "[green]PASS[/]", FAIL: "[bold red]FAIL[/]", NA: "[dim]n/a[/]"}
    title = (f"polyprof plugin check: {report.plugin} ({report.kind}) from {report.target}"
             if report.kind != "?" else f"polyprof plugin check: {report.target} did not load")
    table = Table(title=escape(title), title_justify="left")
    table.add_column("clause", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for r in report.results:
        table.add_row(r.id, style.get(r.status, f"[yellow]{r.status}[/]"), escape(r.reason))  # plain text
    console = Console(file=sys.stdout)  # the terminal's width: reasons fold
    console.print(table)
    n_fail = len(report.failed)
    console.print("[green]all clauses hold[/]" if report.ok else
                  f"[red]{n_fail} clause(s) fail[/]: {', '.join(report.failed) or 'some did not run'}")
    return 0 if report.ok else 1
