"""Helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import logging
import os
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ..errors import OutputError, PolyprofError, one_line, out_of_memory
from ..trace.core import Trace

if TYPE_CHECKING:
    from rich.console import Console

    from ..analyze.window import WindowArg
    from ..collect.plugin import Plugin


#: what each command's ``register`` is given: the ``polyprof`` parser's subparsers
Subparsers = argparse._SubParsersAction


def count(text: str) -> int:
    """argparse type of a number of things (rows, steps): a whole number, 0 or more."""
    return _number(text, int, 0, "a whole number, 0 or more")


def positive(text: str) -> int:
    """argparse type of a number of workers or rows per chunk: a whole number, 1 or more."""
    return _number(text, int, 1, "a whole number, 1 or more")


def seconds(text: str) -> float:
    """argparse type of a time or a threshold: a finite number, 0 or more."""
    return _number(text, float, 0, "a number, 0 or more")


def _number(text: str, kind: type, least: int, what: str) -> Any:
    import math

    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
    if v < least or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text}: expected {what}")
    return v


def add_plugin_args(p: argparse.ArgumentParser) -> None:
    """--plugins, --collect-timeout (as the session declares them) and --plugin."""
    from ..collect.options import add_arguments

    add_arguments(p, ("plugins", "collect_timeout"))
    add_plugin_target_arg(p)


def add_plugin_target_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--add-plugin", action="append", default=[], metavar="TARGET", dest="plugin",
                   help="also load this plugin: a native plugin library (path.so) or a factory "
                        "(pkg.module:Factory), besides those of --plugins; repeatable")
    p.add_argument("--plugin", action="append", dest="plugin", help=argparse.SUPPRESS)  # its name until 0.3


def plugin_list(args: argparse.Namespace, plugins: Sequence[str | Plugin] | None = None) -> list[str | Plugin] | None:
    """The session's plugins: ``plugins`` (names and objects, None: the defaults, unless
    --plugins gives them; beside ``--add-plugin``, ``registry.default_names()``, which the
    session checks as a run that names none does), plus those of ``--add-plugin``: an
    installed plugin by its name (the session loads it, as one of --plugins: one that
    cannot be imported is the trace's error and the program runs), a target (``path.so``,
    ``pkg.module:Factory``) loaded here (one that cannot be is an error before the
    program starts)."""
    from ..collect import registry  # plugin discovery: only for a command that records

    if plugins is None and getattr(args, "plugins", None):
        from ..collect.options import plugin_targets

        plugins = plugin_targets(args.plugins)
    extra = [t if registry.is_installed(t) else registry.load_target(t) for t in getattr(args, "plugin", None) or []]
    if plugins is None:
        if not extra:
            return None
        # the defaults as a run that names none has them (and the broken ones, to be reported):
        # DefaultNames, asked the cheap check (they attach at the program's import of their
        # runtime); one given again by --add-plugin NAME is named: its plain name, the full check
        again = set(p for p in extra if isinstance(p, str))
        plugins = [str(p) if p in again else p for p in registry.default_names()]
    named = set(p for p in plugins if isinstance(p, str))
    return [*plugins, *(p for p in extra if not (isinstance(p, str) and p in named))]


def add_window_args(p: argparse.ArgumentParser, title: str | None = None) -> None:
    """--steps / --skip-first / --all-steps: which steps every analysis looks at."""
    about = title or "default: every step but the first, the warm-up, when there are 3 or more"
    # a group's title is printed as is (argparse wraps only its description): a short title,
    # and the description pre-wrapped for the commands whose formatter keeps text raw (sql)
    g = p.add_argument_group("steps", textwrap.fill(about, 76))
    g.add_argument("--steps", metavar="A:B", help="analyse the steps numbered A to B-1 (A:, :B, or one number N)")
    g.add_argument("--skip-first", type=count, metavar="N", help="leave out the first N steps (0: keep every step)")
    g.add_argument("--all-steps", action="store_true", help="analyse every step (same as --skip-first 0)")
    g.add_argument("--span", choices=("steps", "device"), default="steps",
                   help="analysed span: from the first step to the end of its device work (steps, default) "
                        "or from the first to the last device activity counted (device: HTA's convention)")
    g.add_argument("--round-us", action="store_true",
                   help="round each device activity inward to whole µs of the file's time base, as HTA "
                        "reads Kineto files, for the analyses (with --steps :LAST --span device: HTA's temporal "
                        "breakdown); an export or a query keeps the file's own times")
    g.add_argument("--window", choices=("polyprof", "hta"), default="polyprof",
                   help="hta: HTA 0.5's window and reading of the trace (every step but the last, first to last "
                        "device activity, µs-rounded; the temporal breakdown counts what HTA counts); "
                        "not with the options above")


def add_peak_arg(p: argparse.ArgumentParser) -> None:
    """--peak: device peaks for op_efficiency and mfu over those matched to the trace's device."""
    p.add_argument("--peak", metavar="NAME=VALUE,...",
                   help="device peaks over the matched device's (analyze/peaks.json), e.g. bf16=989e12,hbm=3.35e12 "
                        "(FLOP/s per precision fp64/fp32/tf32/bf16/fp16/fp8/int8, bytes/s for hbm)")


def apply_peak(args: argparse.Namespace) -> None:
    """Checks --peak and hands it to the efficiency tables of this process and its workers
    (``POLYPROF_PEAK``, read by ``analyze/peaks.py``)."""
    text = getattr(args, "peak", None)
    if text:
        from ..analyze.peaks import ENV, parse_override  # only when --peak is given

        parse_override(text)
        os.environ[ENV] = text


def window_from(args: argparse.Namespace, default: WindowArg = "auto") -> WindowArg:
    """The window the options ask for: ``default`` (AUTO) unless --steps, --skip-first,
    --all-steps, --span or --round-us (the analyses are imported only then); ``"hta"``
    for --window hta."""
    if getattr(args, "window", "polyprof") == "hta":
        if args.steps is not None or args.skip_first is not None or args.all_steps \
                or getattr(args, "span", "steps") != "steps" or getattr(args, "round_us", False):
            from ..errors import WindowError

            raise WindowError("--window hta sets the steps, span and rounding itself: leave out --steps, "
                              "--skip-first, --all-steps, --span and --round-us")
        return "hta"
    span = getattr(args, "span", "steps")
    rnd = bool(getattr(args, "round_us", False))
    plain = span == "steps" and not rnd
    if plain and not args.all_steps and args.steps is None and args.skip_first is None:
        return default
    from ..analyze.window import Window

    if args.all_steps:
        if args.skip_first is not None:
            from ..errors import WindowError

            raise WindowError("--all-steps is --skip-first 0: give one of them")
        return Window.parse(args.steps, 0, span, rnd)
    if args.steps is None and args.skip_first is None:  # --span / --round-us alone: the default's steps
        return default if plain else Window.parse(None, None if default == "auto" else 0, span, rnd)
    return Window.parse(args.steps, args.skip_first or 0, span, rnd)


def load_trace(path: str) -> Trace:
    from ..formats.detect import detect, load

    if not os.path.lexists(path):
        from ..store.writer import refuse_unfinished  # (pyarrow: only for a path that is not there)

        refuse_unfinished(Path(path))
    if os.path.isdir(path):
        from ..ranks.sources import TraceFile, one_source_in  # (a directory given for one trace: only then)

        src = one_source_in(path)
        if src is not None and not isinstance(src, TraceFile):  # one process's several files: one trace
            return src.load()
        path = str(src.file if isinstance(src, TraceFile) else path)
    # a progress bar for big Kineto/Chrome JSON files when someone is watching
    if sys.stderr.isatty() and os.path.isfile(path) and os.path.getsize(path) > (16 << 20) \
            and detect(path) == "chrome-json":
        return load(path, progress=True)
    return load(path)


class OutputOverInputError(OutputError):
    """An output path that names what the command reads (an input trace, the script
    ``polyprof run`` runs): writing it would replace that file. Names both paths."""


def _same_path(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: the same inode (a hard link, a symbolic link
    to it, another spelling), or, where one is missing, the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one of them does not exist (yet): where they would be
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_over_inputs(out: str | Path, inputs: Iterable[str | Path], what: str = "input") -> None:
    """OutputOverInputError when the output ``out`` is one of ``inputs`` (``what`` they
    are: "input", "script"), checked before anything is read or run (``convert`` checks
    its store itself: store/writer.check_inputs)."""
    for given in inputs:
        if _same_path(Path(out), Path(given)):
            raise OutputOverInputError(f"{os.fspath(out)}: the output is the {what} {given}; writing it would replace the "
                                       f"{what}: choose another output path")


#: what a page polyprof writes has in its head (report/template.html, report/diff_template.html)
PAGE_TITLES = (b"<title>polyprof report", b"<title>polyprof diff")
#: the output of ``report`` and ``diff -o``, to :func:`check_output`
HTML = "html"


def check_output(out: str | Path, inputs: Iterable[str | Path], writes: str | None, force: bool = False) -> None:
    """Before anything is read: the output ``out`` is none of ``inputs``
    (:func:`refuse_over_inputs`), and a file there is one the command may replace: one it
    wrote before, polyprof's output of the kind it ``writes`` (a format's name:
    ``collect/output.not_ours``, the rule ``polyprof run`` keeps; :data:`HTML`: a
    polyprof report or diff page), an empty file, or any with ``force``; else
    OutputError, as ``run`` refuses it. ``writes`` None: a directory the command writes
    files into (each checked as it is written)."""
    refuse_over_inputs(out, inputs)
    if force or writes is None:
        return
    path = Path(out)
    if writes == HTML:
        what = None if _page(path) else "a polyprof report or diff page"
    else:
        from ..collect.output import not_ours  # (a file at the output only: the registry's formats)

        what = not_ours(path, writes)
    if what is not None:
        raise OutputError(f"{path} is there and is not {what}: refusing to replace it; choose another output "
                          "(-o), remove it, or give --force")


def _a_file(path: Path) -> bool:
    """Whether a non-empty regular file is at ``path`` (not through a symbolic link: the
    writer refuses one, saying how to follow it); one that cannot be looked at: no."""
    try:
        return not path.is_symlink() and path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _page(path: Path) -> bool:
    """Whether ``path`` may be replaced by a page: nothing there to lose (no file, an
    empty one, one that cannot be read: the writer says why), or a page polyprof wrote
    (:data:`PAGE_TITLES` in its first 4 KiB)."""
    if not _a_file(path):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return True
    return any(t in head for t in PAGE_TITLES)


def names_directory(path: str | Path) -> bool:
    """Whether an output given as ``path`` names a directory to write in: it ends with a
    separator (``-o out/``), which a Path drops."""
    return str(path).endswith(("/", os.sep))


def trace_stem(path: str | Path) -> str:
    """A trace's name without the ending that names its format (those a directory of
    ranks is read by, ``ranks/sources.TRACE_SUFFIXES``, and the formats' own, with a
    killed run's ``.partial``): ``host_1.1700.pt.trace.json.gz`` -> ``host_1.1700``,
    ``node1.cl.json`` -> ``node1.cl``; a store's without ``.store`` (``job.store`` -> ``job``);
    a name of no such ending (a directory, another store) whole."""
    from ..formats.registry import all_formats  # (a command that names an output by its input only)
    from ..ranks.sources import TRACE_SUFFIXES
    from ..store.manifest import is_store

    name = Path(path).name
    if name.endswith(".store") and len(name) > 6 and is_store(path):
        return name[:-6]
    endings = {*TRACE_SUFFIXES, *(s for f in all_formats() for s in f.suffixes), ".csv", ".pickle", ".pkl"}
    endings |= {e + ".partial" for e in endings}
    low = name.lower()
    end = max((e for e in endings if low.endswith(e) and len(e) < len(name)), key=len, default="")
    return name[:len(name) - len(end)]


def output_path(path: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """Where a command writes: never one of its ``inputs`` (:func:`refuse_over_inputs`);
    its directory is made if missing (``-o out/r.html``)."""
    out = Path(path)
    refuse_over_inputs(out, inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PolyprofError(f"cannot create the directory {out.parent} for {out} ({e.strerror or e})") from None
    return out


def error_line(e: BaseException, inputs: Sequence[str] = ()) -> str:
    """The one line the CLI prints for an exception (never a traceback; -vv logs one);
    ``inputs``: the files the command read, named where the error does not say which
    (running out of memory)."""
    if isinstance(e, PolyprofError):
        text = str(e)
    elif isinstance(e, OSError):
        where = f"{e.filename}: " if e.filename else ""
        text = f"{where}{e.strerror or e}"
    elif out_of_memory(e):
        text = (f"{', '.join(inputs)}: " if inputs else "") + ("out of memory (the process's memory limit, ulimit "
                                                                "-v or the container's, is below what this needs)")
    else:
        logging.getLogger("polyprof").debug("internal error", exc_info=e)
        text = (f"internal error ({type(e).__name__}: {e}); please report it with the command line "
                "(-vv shows the traceback)")
    return "polyprof: error: " + one_line(text, None)


def console(**kw: Any) -> Console:
    """rich's ``Console(**kw)``, whose closed output (``polyprof plugins | head -1``) ends
    the command as a closed pipe ends every command: exit status 0, nothing said (rich's
    own ``on_broken_pipe`` exits with status 1)."""
    return _quiet_on_closed_pipe()(**kw)


@functools.lru_cache(maxsize=None)
def _quiet_on_closed_pipe() -> type[Console]:
    from rich.console import Console  # (the commands that print through rich only)

    class Piped(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # (as rich does: stdout on /dev/null, so the last flush has nowhere to fail)
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise BrokenPipeError(errno.EPIPE, "the output's reader went away")  # (cli._command: status 0)

    return Piped


def print_summary(trace: Trace, top: int = 15, window: WindowArg = "auto") -> None:
    from ..report.terminal import print_summary as show

    show(trace, top=top, window=window)
