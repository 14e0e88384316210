"""The ``polyprof`` command. Each subcommand is one module in this package that
defines ``register(subparsers)``; add a command by adding a module to COMMANDS."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, Sequence

from .. import logs
from ..errors import PolyprofError, out_of_memory
from ..lowlevel import blas, descriptors, heap
from ..lowlevel.exit import quick_exit
from ..report.encoding import encodable

COMMANDS = ["run", "summary", "report", "sql", "export", "plugins", "plugin", "demo", "diff"]
COMMANDS.append("convert")  # traces -> an on-disk store (issue 13)
COMMANDS.append("capture")  # capture running processes on demand (issue 14)
COMMANDS.append("critical-path")  # a job's critical path and what-ifs (issue 32)
#: commands that only read traces and write results (no profiled program runs in them)
READ_ONLY = {"summary", "report", "sql", "export", "diff", "convert", "critical-path"}
#: read-only commands whose every output is closed when they return (stdout, or a file
#: written whole): the ``polyprof`` command ends them without tearing down the heap
QUICK_EXIT = {"summary", "report", "diff"}

DESCRIPTION = """\
polyprof: a vendor-neutral profiler for ML and dataflow programs.

  polyprof run train.py            profile a script, write train.polyprof,
                                   print a summary
  polyprof summary train.polyprof  where the time went (any format it reads)
  polyprof export FILE -o t.json   open it in Perfetto / chrome://tracing
  polyprof report FILE -o r.html   one self-contained HTML report
  polyprof sql FILE "SELECT ..."   query the events with DuckDB
  polyprof diff A B                what got slower or faster between two runs
  polyprof demo                    profile a bundled workload
  polyprof run --serve 127.0.0.1:9012 train.py
                                   serve captures on demand, and then
  polyprof capture 127.0.0.1:9012 -o c.polyprof
                                   record the next second of it

Formats read (by content, not name; docs/formats.md): .polyprof and a killed
run's .polyprof.partial, PyTorch/Kineto and Chrome JSON (gzip or xz; also
torch's legacy profiler, TensorFlow 1.x timelines, onnxruntime profiles),
torch's memory timeline and CUDA memory snapshots, TensorFlow/JAX XSpace,
Perfetto protobuf, Nsight Systems SQLite and its nsys stats CSV trace
reports, nvprof files, rocpd, RPD (rocmProfileData), rocprofv3 JSON and CSV,
rocprof v1 results, polyprof's Parquet export.
"""


class _Wrap(argparse.HelpFormatter):
    """argparse's help, wrapped between words only: an option named in a text
    (``--token-file``) is never broken at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(self._whitespace_matcher.sub(" ", text).strip(), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


class _RawWrap(_Wrap, argparse.RawDescriptionHelpFormatter):
    """A description kept as written, the options' help wrapped as :class:`_Wrap`."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return argparse.RawDescriptionHelpFormatter._fill_text(self, text, width, indent)


class _Parser(argparse.ArgumentParser):
    """A command's parser: :class:`_Wrap` unless it keeps its description raw; its
    ``examples`` (command lines, each with what it does) end its ``--help``."""

    def __init__(self, *args: Any, examples: Sequence[tuple[str, str]] = (), **kw: Any) -> None:
        given = kw.get("formatter_class")
        kw["formatter_class"] = _RawWrap if given is argparse.RawDescriptionHelpFormatter else (given or _Wrap)
        super().__init__(*args, **kw)
        self.examples = list(examples)
        # -v after the command too (``polyprof summary -v FILE``), counted with one before it
        self.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                          help="more log output (-vv: debug)")

    def format_help(self) -> str:
        import textwrap

        if not self.examples:
            return super().format_help()
        lines = ["examples:"]
        for command, what in self.examples:
            lines.append(f"  {command}")
            lines += textwrap.wrap(what, 76, initial_indent="      ", subsequent_indent="      ")
        return super().format_help() + "\n" + "\n".join(lines) + "\n"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the command ``only`` alone (importing every
    command's module and building its parser was part of each `polyprof run`'s start)."""
    parser = argparse.ArgumentParser(prog="polyprof", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    parser.add_argument("--version", action="version", version=f"polyprof {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        if only is None or name == only:
            importlib.import_module(f"{__name__}.{name.replace('-', '_')}").register(sub)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names: its first argument that is not an option (the
    options before a command take no value); None when it names no known command."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def _version() -> str:
    from .._version import __version__  # not the session's module: it imports NumPy

    return __version__


#: commands whose start is a profiled program's start (cli/run.py): lowlevel.heap.quiet_start
QUICK_START = {"run"}
#: whether the garbage collector was on when :func:`main` began (restored when it returns)
gc_was_enabled = True


def main(argv: list[str] | None = None, *, process_ends: bool = False) -> int:
    """Run one polyprof command; its exit code. ``process_ends``: the process ends when
    this returns (the ``polyprof`` command, :func:`entry`): ``polyprof run`` then lets
    python end the program's threads before it stops (cli/run.py)."""
    global gc_was_enabled
    argv = sys.argv[1:] if argv is None else list(argv)
    gc_was_enabled = heap.collector_on()
    command = command_of(argv)
    if command in QUICK_EXIT:
        heap.pause_for_command()
    try:
        if command in QUICK_START:
            descriptors.reserve()  # before NumPy's and the plugins' threads start (lowlevel/descriptors.py)
            heap.quiet_start()
        elif command in READ_ONLY and not {"-h", "--help"} & set(argv):
            blas.import_numpy_single_threaded()
            heap.prepare_heap()
        return _main(argv, process_ends)
    except (MemoryError, ImportError) as e:  # before a command's own handling: importing it (a memory limit)
        if not out_of_memory(e):
            raise
        print(f"polyprof: error: out of memory starting `polyprof {command}`: "
              "the process's memory limit (ulimit -v or the container's) is below what polyprof needs to start",
              file=sys.stderr)
        return 1
    finally:
        heap.restore_collector(gc_was_enabled)


@contextlib.contextmanager
def logging_to_stderr(verbose: int) -> Iterator[None]:
    """polyprof's own log lines on stderr while a command runs, at WARNING (``-v`` INFO,
    ``-vv`` DEBUG). Only the ``polyprof`` logger is touched, never the root logger: under
    ``polyprof run`` that one is the profiled program's, and its own
    ``logging.basicConfig`` (and its libraries' loggers, dask's at INFO) must work as
    they do without polyprof. Where the root logger already has handlers (``main()``
    called in a program that set up logging, pytest's), polyprof's lines go to them
    alone. The logger is put back as it was afterwards."""
    log = logging.getLogger(logs.LOGGER)
    before = log.level, list(log.handlers)
    if verbose:
        log.setLevel([logging.INFO, logging.DEBUG][min(verbose, 2) - 1])
    if not logging.getLogger().handlers:
        logs.to_stderr()
    try:
        yield
    finally:
        log.setLevel(before[0])
        log.handlers = before[1]


def _main(argv: list[str], process_ends: bool) -> int:
    parser = build_parser(only=command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.process_ends = process_ends
    with logging_to_stderr(args.verbose):
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    from .common import error_line

    try:
        if args.command == "run":  # the program's streams are its own: run.py takes them for its lines only
            rc = int(args.func(args) or 0)
        else:
            with encodable(sys.stdout, sys.stderr), heap.for_command(args.command in READ_ONLY):
                rc = int(args.func(args) or 0)
        if args.command in READ_ONLY:
            heap.freeze_for_exit()
        return rc
    except BrokenPipeError:
        return 0
    except (PolyprofError, OSError, MemoryError) as e:
        print(error_line(e, _inputs(args)), file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - one line, never a traceback (-vv logs it)
        if not _SIGNALLED:  # (a library that turned the signal into its own error: no internal error)
            print(error_line(e), file=sys.stderr)
        return 1


def _inputs(args: argparse.Namespace) -> list[str]:
    """The files a command was given (its ``file`` or ``inputs`` argument)."""
    given = getattr(args, "file", None) or getattr(args, "inputs", None) or []
    return [str(x) for x in ([given] if isinstance(given, (str, os.PathLike)) else given)]


#: commands that a SIGTERM or SIGHUP ends by unwinding, so that their ``finally`` blocks
#: remove what they made (a compressed database inflated into TMPDIR, a half-written
#: output, a capture's temporary directory) before the signal's default action ends the
#: process (``polyprof run`` handles the signals itself: cli/run.py)
UNWOUND = READ_ONLY | {"capture"}


#: the signals :func:`unwinding_on_signals` caught, in order (at most one: the handler then
#: gives the signal its default action again)
_SIGNALLED: list[int] = []


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM or SIGHUP during an :data:`UNWOUND` command."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


@contextlib.contextmanager
def unwinding_on_signals(command: str | None) -> Iterator[None]:
    """While an :data:`UNWOUND` command runs, SIGTERM and SIGHUP (those left at their default
    action) raise :class:`Terminated`; once the command has unwound, the process ends by
    the signal, as without the handler (status -15 for SIGTERM). A second signal, or one
    in a forked worker, takes the default action at once."""
    if command not in UNWOUND:
        yield
        return
    import os
    import signal  # (only the polyprof command's read commands need it)

    pid = os.getpid()

    def on_signal(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != pid:  # a forked worker inherited the handler: it dies as it would have
            os.kill(os.getpid(), signum)
            return
        _SIGNALLED.append(signum)  # also where a library swallows the exception (DuckDB: "interrupted")
        raise Terminated(signum)

    names = ("SIGTERM", "SIGHUP")
    wanted = [getattr(signal, n) for n in names if hasattr(signal, n)]
    previous = [s for s in wanted if signal.getsignal(s) == signal.SIG_DFL]
    for s in previous:
        signal.signal(s, on_signal)
    try:
        yield
    except Terminated:
        pass
    except BaseException:
        if not _SIGNALLED:
            raise
    finally:
        for s in previous:
            if signal.getsignal(s) is on_signal:
                signal.signal(s, signal.SIG_DFL)
    if _SIGNALLED:  # unwound (or the command ended some other way after it): die by the signal
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        signum = _SIGNALLED[0]
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        raise SystemExit(128 + signum)  # (only if the signal did not end it)


#: the exit code of a command Ctrl-C ended (a shell's for SIGINT, 128 + 2)
INTERRUPTED = 130


def _bare_error_line(e: BaseException, inputs: Sequence[str] = ()) -> str:
    return f"polyprof: error: {type(e).__name__}: {e}"


def entry() -> None:
    """The ``polyprof`` command (console script and ``python -m polyprof``): :func:`main`
    (a SIGTERM unwinds it first: :func:`unwinding_on_signals`); then, after
    :data:`QUICK_EXIT` commands, :func:`polyprof.lowlevel.exit.quick_exit`.
    ``main()`` called in a program returns as usual."""
    argv = sys.argv[1:]
    try:
        with unwinding_on_signals(command_of(argv)):
            rc = main(argv, process_ends=True)
    except KeyboardInterrupt:  # Ctrl-C: one line, as every error; outputs unwound (outfile.py)
        if command_of(argv) == "run":  # the program's own, re-raised by cli/run.py: python's way
            raise
        print("polyprof: interrupted", file=sys.stderr)
        rc = INTERRUPTED
    if command_of(argv) in QUICK_EXIT:
        try:
            from .common import error_line
        except (MemoryError, OSError, ImportError):  # (no memory left to import it: a bare line)
            error_line = _bare_error_line  # noqa: N806
        quick_exit(rc, lambda e: print(error_line(e), file=sys.stderr))
    sys.exit(rc)


if __name__ == "__main__":
    entry()
