"""polyprof run: profile a script unchanged, as ``python script.py`` would run it."""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from ..collect.session import Session
from .common import add_plugin_args, plugin_list, print_summary


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="profile a Python script and write a .polyprof trace",
                       description="Run SCRIPT as __main__ inside a profiling session. The exit code is "
                                   "the script's; the trace is written even if the script raises, "
                                   "calls sys.exit or is interrupted (SIGINT/SIGTERM).")
    p.add_argument("-o", "--output", help="trace file to write (default: SCRIPT_STEM.polyprof)")
    add_plugin_args(p)
    p.add_argument("--no-summary", action="store_true", help="do not print the summary")
    p.add_argument("-m", dest="module", action="store_true", help="SCRIPT is a module name, as python -m")
    p.add_argument("script", help="the script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run)


def _on_signal(signum: int, frame: Any) -> None:
    # Unwind the script through its finally/with blocks so open sections complete.
    raise SystemExit(128 + signum)


def run_script(target: str, args: list[str], module: bool = False) -> int:
    """Run the script as __main__; return the exit code it would have had."""
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [target, *args]
    if not module:
        sys.path.insert(0, str(Path(target).resolve().parent))
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path


def run(args: argparse.Namespace) -> int:
    target = args.script
    if not args.module and not Path(target).is_file():
        print(f"polyprof: error: {target}: no such script", file=sys.stderr)
        return 2
    stem = target.rsplit(".", 1)[-1] if args.module else Path(target).stem
    output = Path(args.output or f"{stem}.polyprof")
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM,)}
    session = Session(plugin_list(args), output=output, collect_timeout=args.collect_timeout)
    session.start()
    try:
        code = run_script(target, args.args, args.module)
    finally:
        try:
            trace = session.stop()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
    sys.stdout.flush()
    if not args.no_summary:
        print_summary(trace)
    print(f"polyprof: trace written to {output} ({trace.n_events} events)", file=sys.stderr)
    if os.environ.get("POLYPROF_DEBUG_EXIT"):
        print(f"polyprof: script exit code {code}", file=sys.stderr)
    return code
