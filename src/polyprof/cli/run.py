"""polyprof run: profile a script unchanged, as ``python script.py`` would run it.

Signals: SIGINT unwinds the script as Python does (KeyboardInterrupt); SIGTERM, SIGHUP,
SIGUSR1 and SIGUSR2 (when the script has not set its own handler) unwind it too, so
open sections complete. Once the trace is saved, polyprof ends by the same signal,
so the caller sees the status a plain ``python`` would have had (after a
KeyboardInterrupt, under the ``polyprof`` command: once every ``atexit`` callback has
run, as python runs them: :func:`_ended`). SIGSEGV and other
fatal signals keep their default action (the crash journal keeps the host data of a
killed program; one line says where: collect/exits.py). ``os.execv`` and its family, and
``os._exit``, write the trace first (collect/exits.py).
A process forked from the script that returns here (instead of exiting) ends with
its exit code and writes nothing: the trace is the parent's.
Under the ``polyprof`` command, python's own wait for the program's non-daemon threads
comes before the stop, so their work is in the trace; its ``atexit`` callbacks run
after it, at python's end (``cli/thread_end.py``), and the script's module is
``__main__`` again for them and the threads (cli/script_exec.py).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import runpy
import signal
import sys
import threading
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import FrameType, TracebackType
from typing import Iterator, TextIO

from ..collect import signals
from ..collect.session import Session
from ..errors import OutputError, PolyprofError
from ..lowlevel import heap
from ..report.encoding import encodable
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.identity import launcher_rank
from ..collect import options
from ..collect.output import not_ours, per_rank, written_line
from .thread_end import end_threads, reopened
from .. import logs
from . import own_output, script_exec, script_modules
from .common import (Subparsers, add_peak_arg, add_plugin_target_arg, apply_peak, error_line, names_directory,
                     plugin_list, print_summary, refuse_over_inputs)


#: what ``polyprof run --help`` ends with
EXAMPLES = [
    ("polyprof run train.py --epochs 3",
     "profile train.py (its own arguments after it) with every available plugin; write train.polyprof and "
     "print the summary"),
    ("polyprof run --plugins torch -o out/ train.py", "only the torch plugin; write out/train.polyprof"),
    ("polyprof run --schedule skip_first=10,wait=0,warmup=1,active=3 train.py",
     "record 3 steps after 10 left out and 1 of warm-up, as torch.profiler's schedule"),
    ("polyprof run -o t.pt.trace.json -m mypkg.train",
     "run a module, as python -m, and write Kineto JSON (HTA, TensorBoard)"),
    ("polyprof run --serve 127.0.0.1:9012 train.py", "record nothing until `polyprof capture 127.0.0.1:9012` asks"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("run", examples=EXAMPLES, help="profile a Python script and write a .polyprof trace",
                       description="Run SCRIPT as __main__ inside a profiling session. The exit code is "
                                   "the script's; the trace is written even if the script raises, "
                                   "calls sys.exit or is interrupted (SIGINT/SIGTERM). As python does, "
                                   "the program's threads are waited for when the script returns: "
                                   "their work is in the trace. -o DIR/ (ending with /) writes "
                                   "SCRIPT_STEM.polyprof in DIR.")
    options.add_arguments(p)  # the session's options, declared once (collect/options.py)
    add_plugin_target_arg(p)
    p.add_argument("--no-summary", action="store_true", help="do not print the summary")
    add_peak_arg(p)  # for the summary's MFU (given to the analyses after the script: not in its environment)
    p.add_argument("--serve", metavar="HOST:PORT",
                   help="record nothing until a capture arrives: serve captures on HOST:PORT "
                        "(`polyprof capture`, XProf; also $POLYPROF_SERVE). Loopback unless a token "
                        "or TLS is set, see docs/capture.md")
    p.add_argument("-m", dest="module", action="store_true", help="SCRIPT is a module name, as python -m")
    p.add_argument("script", help="the script: a file, or a directory or zip archive with a __main__.py, as python "
                                  "runs them (or a module, with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run)


#: launchers that run the program in child processes (``-m`` modules, or scripts by name):
#: profiled themselves, they record none of the ranks' work
LAUNCHERS = frozenset(("torch.distributed.run", "torch.distributed.launch", "torchrun"))
#: signals that unwind the script (when it has no handler of its own for them)
UNWIND = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2") if hasattr(signal, n))
_received: list[int] = []


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Unwind the script through its finally/with blocks so open sections complete and
    the trace is written. Only while this is the signal's handler: a program that set
    its own and calls the one it found handles the signal itself, as it would without
    polyprof; then this does nothing (the program sees SIG_DFL here: signals.hidden).
    Once only: the signal's default action is back for a second one, so a program that
    swallows the SystemExit (``except BaseException``) is still ended by the next."""
    if signals.real_getsignal(signum) is not _on_signal:
        return
    _received.append(signum)
    signals.real_signal(signum, signal.SIG_DFL)
    raise SystemExit(128 + signum)


def _die_like(signum: int) -> None:
    """End this process by ``signum`` with its default action (the status python would have)."""
    _flush(sys.stdout, sys.stderr)
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)


def run_script(target: str, args: list[str], module: bool = False, keep: bool = False) -> int:
    """Run the script as __main__; return the exit code it would have had. ``keep``: the
    script's ``sys.argv``, ``sys.path`` and modules stay (for its threads and ``atexit``
    callbacks); otherwise polyprof's are back."""
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [target, *args]
    # as python does: the script's directory, or (-m) the current directory, or a directory's
    # or zip archive's own path, comes first (run_path puts that one there while it runs it:
    # here for what runs after), and its modules are the script's, not polyprof's (cli/script_modules.py)
    app = not module and script_exec.application(target)
    first = os.getcwd() if module else os.path.abspath(target) if app else str(Path(target).resolve().parent)
    if not app:
        sys.path.insert(0, first)
    shadowed = script_modules.take_out(first)
    try:
        with script_exec.script_at_stack_bottom(None if module else target), signals.hidden(_on_signal):
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:  # __file__ absolute, as python gives it since 3.9 (sys.argv[0] as typed)
                runpy.run_path(os.path.abspath(target), run_name="__main__")
        return 0
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        _say_exit_message(code)
        return 1
    except KeyboardInterrupt as e:
        _say_script_error(e)
        _received.append(signal.SIGINT)
        return 130
    except BaseException as e:
        _say_script_error(e)
        return 1
    finally:
        if keep and app:
            sys.path.insert(0, first)
        if not keep:
            sys.argv = old_argv
            sys.path[:] = old_path
            if shadowed is not None:
                shadowed.restore()


#: where the frames of the launcher (this module, runpy, script_exec) beneath the script's come from
_LAUNCHER_FILES = frozenset((__file__, script_exec.__file__, getattr(runpy, "__file__", None) or "", "<frozen runpy>"))


def _say_exit_message(code: object) -> None:
    """``sys.exit(message)``'s message as python says it: ``str(message)`` on the
    program's ``sys.stderr`` (fd 2 where that is None), then a newline (on fd 2 where
    ``sys.stderr`` fails). A stream the program closed, or a ``__str__`` that raises,
    leaves the newline alone, as python; never an exception (the trace is still to write)."""
    err = sys.stderr
    try:
        text = str(code)
        if err is None:
            os.write(2, text.encode(errors="backslashreplace"))
        else:
            err.write(text)
    except Exception:  # noqa: BLE001 - python says nothing more either
        pass
    try:
        if err is None:
            raise ValueError("no sys.stderr")
        err.write("\n")
        err.flush()
    except Exception:  # noqa: BLE001 - closed or failing: python's newline goes to fd 2 then
        _write_fd2(b"\n")


def _say_script_error(e: BaseException) -> None:
    """:func:`_print_script_error`, which never raises: where the program's ``sys.stderr``
    cannot take the traceback (closed), fd 2 gets python's last words for it; where it is
    None, nothing is said (python says nothing either)."""
    if sys.stderr is None and sys.excepthook is sys.__excepthook__:
        return
    try:
        _print_script_error(e)
    except Exception:  # noqa: BLE001 - the trace is still to write
        _write_fd2(b"lost sys.stderr\n")


def _write_fd2(data: bytes) -> None:
    try:
        os.write(2, data)
    except OSError:  # the program closed fd 2 too
        pass


def _print_script_error(e: BaseException) -> None:
    """The traceback of the script's uncaught exception as python prints it: from the
    script's frame on, without the launcher's frames beneath it; through the program's
    own ``sys.excepthook`` where it set one, as python calls it (torch.distributed's puts
    ``[rank0]:`` before each line, rich's draws a panel); a hook that fails is said, then
    the exception, as python does."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _LAUNCHER_FILES:
        tb = tb.tb_next
    hook = sys.excepthook
    if hook is not sys.__excepthook__:
        try:
            hook(type(e), e.with_traceback(tb), tb)
            return
        except Exception as failed:  # noqa: BLE001 - python's words for a hook that fails
            print("Error in sys.excepthook:", file=sys.stderr)
            traceback.print_exception(type(failed), failed, failed.__traceback__)
            print("\nOriginal exception was:", file=sys.stderr)
    traceback.print_exception(type(e), e, tb)


def _prepared(args: argparse.Namespace) -> options.SessionOptions | int:
    """The session's options, checked before the program runs; or the exit code of a run
    that ends here (no such script, --serve)."""
    if not args.module and _is_interpreter(args.script):
        dropped = _without_interpreter(args)
        if dropped is not None:
            return dropped
    target = args.script
    why = None if args.module else script_exec.unrunnable(target)  # (a directory with __main__.py runs, as python's)
    if why is not None:
        print(f"polyprof: error: {target}: {why[0]}", file=sys.stderr)
        return why[1]
    if args.module and _no_module(target):
        print(f"polyprof: error: {target}: no such module (python -m {target} finds none)", file=sys.stderr)
        return 2
    if args.peak:
        from ..analyze.peaks import parse_override  # only when --peak is given

        parse_override(args.peak)  # a bad --peak fails before the program runs
    if (target if args.module else Path(target).name) in LAUNCHERS:
        print(f"polyprof: note: {target} starts each rank in a child process, which this session does not "
              "record (it records the launcher); to profile the ranks, run polyprof under the launcher: "
              "`torchrun ... -m polyprof run SCRIPT ...` (docs/ranks.md)", file=sys.stderr)
    if args.serve:
        return _run_serving(args, args.serve, "--serve")
    from_env = os.environ.get("POLYPROF_SERVE", "").strip()
    if from_env:
        asked = _recording_flags(args)
        if not asked:
            return _run_serving(args, from_env, "POLYPROF_SERVE")
        print(f"polyprof: note: POLYPROF_SERVE={from_env} is set in the environment, but {', '.join(asked)} "
              f"{'asks' if len(asked) == 1 else 'ask'} for a recording of this run: it records as asked and serves no captures (give --serve to serve, "
              "or unset POLYPROF_SERVE)", file=sys.stderr)
    settings = session_options(args)  # flags over $POLYPROF_* over the defaults
    name = (target.rsplit(".", 1)[-1] if args.module else Path(os.path.abspath(target)).stem or "main") + ".polyprof"
    if settings.output is None or names_directory(_output_given(args)):
        # the default name, here or in the directory -o names (`-o runs/`, as export's): before the program runs
        settings = replace(settings, output=(settings.output or Path()) / name)
    elif settings.output.is_dir():  # (export's and report's writers refuse it at once too)
        raise OutputError(f"{settings.output} is a directory: give -o {os.path.join(settings.output, '')} to write "
                          f"{name} in it, or a file's name")
    _refuse_a_file_for_a_directory(settings.output)
    if not args.module and settings.output is not None:  # before the program runs (x.polyprof's is itself)
        refuse_over_inputs(settings.output, [target], "script")
    out = per_rank(settings.output) if settings.output is not None else None
    what = not_ours(out) if out is not None else None  # (its name picks the format: collect/output.py)
    if what is not None:
        raise OutputError(f"{out} is there and is not {what}: refusing to replace it; choose another output (-o) "
                          "or remove it")
    return settings


def _output_given(args: argparse.Namespace) -> str:
    """The output as typed (-o, else ``$POLYPROF_OUTPUT``), with the trailing separator
    that its Path has lost."""
    given = getattr(args, "output", None)
    return (given if given is not None else os.environ.get(options.env_name("output"), "")).strip()


def _refuse_a_file_for_a_directory(output: Path | None) -> None:
    """OutputError, before the program runs, where a directory the output is to go in is a
    file (``-o notes.txt/``): its save could only fall back to the temporary directory."""
    folder = output.parent if output is not None else None
    while folder is not None and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder is not None and folder.exists() and not folder.is_dir():
        raise OutputError(f"{output}: {folder} is a file, not a directory; choose another output (-o)")


def run(args: argparse.Namespace) -> int:
    settings = _prepared(args)
    if isinstance(settings, int):
        return settings
    target = args.script
    first = sys.stdout, sys.stderr
    # polyprof's lines go to the stdout and stderr it started with, whatever the program
    # does with sys.stdout/sys.stderr and fd 1/2 (cli/own_output.py); run_script is called
    # here, no deeper (the frames beneath the script count: script_exec._depth_given_back)
    with own_output.taken(*first) as (out, err, copied), \
            (logs.own_stderr(err) if copied else nullcontext()):
        ends = bool(getattr(args, "process_ends", False))
        previous = {s: signal.signal(s, _on_signal) for s in UNWIND if signal.getsignal(s) == signal.SIG_DFL}
        cwd = os.getcwd()  # the program may change it: the trace goes where it was asked for from here
        session = Session(settings=settings)
        pid = os.getpid()
        _received.clear()
        session.owns_process = True  # the program is not running yet: its plugins' calls are guarded (collect/guard.py)
        session.start()
        session.owns_process = False
        started = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
        _freeze_what_polyprof_made()
        own = sys.argv, list(sys.path)
        code = run_script(target, args.args, args.module, keep=ends)  # never raises
        if os.getpid() != pid:  # a forked child came back here: the trace is the parent's
            return _ended(code, ends)
        script_exec.keep_script_main(ends, args.module or script_exec.application(target))
        if ends and set(_received) <= {signal.SIGINT}:  # (a signal that unwound the script ends it now, as python)
            end_threads(started, _received, session.plugin_packages())
        with _own_streams((out, err), first), _as_polyprof(own, ends):
            trace: Trace | None
            session.owns_process = True  # the script has returned
            try:
                trace = session.stop()  # a signal during the save is held, then delivered here
            except KeyboardInterrupt:
                _received.append(signal.SIGINT)
                trace = session.trace
            except SystemExit:  # _on_signal noted which
                trace = session.trace
            except Exception as e:  # noqa: BLE001 - said here, on polyprof's stderr (not the program's)
                print(error_line(e), file=sys.stderr)
                return 1
            finally:
                for s, h in previous.items():
                    if signal.getsignal(s) == _on_signal:
                        signal.signal(s, h)
            assert trace is not None
            job = launcher_rank()
            if not args.no_summary and not isinstance(sys.stdout, _Discard) and not (job and job[0] and job[1] > 1):
                try:
                    apply_peak(args)
                    print_summary(trace)
                except Exception as e:  # noqa: BLE001 - the script's exit code and the trace's line come first
                    print(f"{error_line(e)} (in the summary; the trace is written)", file=sys.stderr)
            _report_written(session, trace.n_events, cwd)
            if not args.no_summary and job and job[1] > 1:
                _job_note(job, session, cwd)
            _note_nothing_recorded(trace)
            if os.environ.get("POLYPROF_DEBUG_EXIT"):
                print(f"polyprof: script exit code {code}", file=sys.stderr)
            if _received and not (ends and _interrupted()):  # killed by a signal: end the way plain python would have
                _die_like(next((s for s in _received if s != signal.SIGINT), _received[0]))  # (SIGINT unwinds, no kill)
        return _ended(code, ends)


def _interrupted() -> bool:
    """Whether the program was ended by Ctrl-C (SIGINT) alone."""
    return bool(_received) and set(_received) == {signal.SIGINT}


def _ended(code: int, ends: bool) -> int:
    """The exit code; or, under the ``polyprof`` command when Ctrl-C alone ended the
    script, its KeyboardInterrupt again, out of ``entry()`` uncaught: the interpreter then
    ends as after its own script's, every ``atexit`` callback run (the program's,
    ``logging.shutdown``'s flush) before it dies by SIGINT. The traceback was said (the
    script's): the interpreter's ``sys.excepthook`` call for this one says nothing."""
    if not (ends and _interrupted()):
        return code
    interrupt = KeyboardInterrupt()
    hook = sys.excepthook

    def quiet(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if value is not interrupt:
            hook(kind, value, tb)

    sys.excepthook = quiet
    raise interrupt


@contextmanager
def _as_polyprof(own: tuple[list[str], list[str]], ends: bool) -> Iterator[None]:
    """polyprof's own ``sys.argv``, ``sys.path`` and modules (cli/script_modules.py) while
    it stops and sums up after a script that keeps its own to the end (``ends``), with
    ``threading``'s and ``concurrent.futures``' shutdown flags cleared
    (``thread_end.reopened``); the script's back after, for its ``atexit`` callbacks."""
    if not ends:
        yield
        return
    script = sys.argv, list(sys.path)
    sys.argv, sys.path[:] = own[0], own[1]
    shadowed = script_modules.current()
    try:
        with reopened(), (shadowed.polyprofs_back() if shadowed is not None else nullcontext()):
            yield
    finally:
        sys.argv, sys.path[:] = script[0], script[1]


@contextmanager
def _own_streams(own: tuple[TextIO, TextIO], first: tuple[TextIO, TextIO]) -> Iterator[None]:
    """polyprof's own output after the script (its warnings, the summary, where the trace
    went) on its own streams (``own``: cli/own_output.py): a program that set
    ``sys.stdout`` or ``sys.stderr`` to a file or a StringIO of its own keeps what it
    wrote there as under python, and one that closed the streams polyprof started with
    (``first``) loses polyprof's lines on that stream, not its exit code. The program's
    streams are back for what runs after (its ``atexit`` handlers)."""
    program = sys.stdout, sys.stderr
    _flush(*program)
    out, err = (o if not (o.closed or f is None or f.closed) else _Discard() for o, f in zip(own, first))
    sys.stdout, sys.stderr = out, err
    try:
        with encodable(sys.stdout, sys.stderr):  # (an ASCII locale: the tables' lines as ASCII)
            yield
    finally:
        _flush(sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = program


class _Discard(io.StringIO):
    """Where polyprof's lines go when the program closed the stream they were for."""

    def write(self, s: str) -> int:
        return len(s)


def _flush(*streams: TextIO) -> None:
    for stream in streams:
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or not a file: nothing to flush
            pass


def session_options(args: argparse.Namespace) -> options.SessionOptions:
    """The session's options: the flags given, over the environment's, over the defaults;
    ``--plugin`` targets are added to the plugins (to the default ones if none are named)."""
    settings = options.make(None, **options.from_arguments(args))
    if getattr(args, "plugin", None):
        named = None if settings.plugins is None else list(settings.plugins)
        settings = replace(settings, plugins=tuple(plugin_list(args, named) or ()))
    return settings


def _freeze_what_polyprof_made() -> None:
    """Just before the program starts: lowlevel.heap.freeze_before_program (the
    ``polyprof`` command started `run` with the collector off: cli/__init__.py)."""
    from . import gc_was_enabled

    heap.freeze_before_program(gc_was_enabled)


def _report_written(session: Session, n_events: int, cwd: str) -> None:
    """The line that says where the trace went: paths under the directory polyprof
    started in as given from there (the program may have changed directory since). Not
    again for a session that an exec stopped early (one that failed late, ENOEXEC): its
    line was said then (collect/exits.py)."""
    if session.ended_by is not None:
        return
    print(written_line(session.written, n_events, cwd), file=sys.stderr)


def _job_note(job: tuple[int, int], session: Session, cwd: str) -> None:
    """Under a launcher (torchrun, MPI, SLURM), one rank of ``job`` (rank, world size):
    rank 0 printed its summary, which says so; the others print none (a job of 8 ranks
    printed 8 summaries, none naming its rank), and each says how to see the job's."""
    path = session.written.path if session.written else None
    where = os.path.dirname(os.path.relpath(path, cwd)) if path else ""
    which = "the summary above is rank 0's alone" if not job[0] else f"rank {job[0]}'s summary is left out"
    print(f"polyprof: rank {job[0]} of {job[1]}: {which}; the job's, every rank side by side: polyprof summary "
          f"{where or '.'}", file=sys.stderr)


def _note_nothing_recorded(trace: Trace) -> None:
    """A note when the trace holds nothing the program ran, which it said only as "0
    events": the program ran JAX computations and the session had no jax plugin (opt-in),
    it ran TensorFlow (no plugin records it), or no plugin recorded anything (no torch,
    OpenCL or JAX work: a Polars, DuckDB or NumPy program) and the program marked no
    sections. Not where the session already said why (a schedule or time window that
    recorded nothing, or children that did the work, say so themselves)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    ran = bool(getattr(bridge, "_backends", None))  # a backend is made at the first computation
    if ran and "jax" not in (trace.metadata.get(mkeys.PLUGINS) or {}):
        print("polyprof: note: the program ran JAX, whose work is not in this trace: polyprof records "
              "JAX only when asked, `polyprof run --plugins jax ...` (docs/plugins.md)", file=sys.stderr)
    elif not trace.n_events and "tensorflow" in sys.modules:
        print("polyprof: note: the program ran TensorFlow, which polyprof run does not record: record it with "
              "TensorFlow's profiler (tf.profiler.experimental.start(LOGDIR) ... stop(), then polyprof summary "
              "LOGDIR), or serve captures (tf.profiler.experimental.server.start(PORT), then polyprof capture "
              "127.0.0.1:PORT; docs/capture.md)", file=sys.stderr)
    elif not trace.n_events and not trace.metadata.get(mkeys.WARNINGS) and not trace.metadata.get(mkeys.SCHEDULE):
        print("polyprof: note: nothing the program ran was recorded (no torch, OpenCL or JAX work, no "
              "sections): mark its parts with `with polyprof.section(\"name\"):` to see where its time goes "
              "(README.md, \"Mark the parts of your program\")", file=sys.stderr)


@cache
def _interpreter_name() -> re.Pattern[str]:
    return re.compile(r"python(\d+(\.\d+)?)?(\.exe)?")


def _is_interpreter(word: str) -> bool:
    """Whether ``word`` names a Python interpreter (``python``, ``python3.11``, this
    interpreter's name, or a path to one) rather than a script: ``polyprof run python
    x.py``, as users type it. A script file of that name stays a script."""
    name = Path(word).name
    if name != Path(sys.executable).name and not _interpreter_name().fullmatch(name):
        return False
    path = Path(word)
    return not (path.is_file() and not os.access(path, os.X_OK))


def _without_interpreter(args: argparse.Namespace) -> int | None:
    """``polyprof run python x.py ...`` (or ``python -m mod ...``) run as ``polyprof run
    x.py ...`` (``-m mod``): the interpreter word dropped, in ``args``; or the exit code
    of a line that says what polyprof run takes when no script or ``-m`` follows it."""
    rest = list(args.args)
    if rest[:1] == ["-m"] and len(rest) > 1:
        args.module, args.script, args.args = True, rest[1], rest[2:]
        return None
    if rest and not rest[0].startswith("-"):
        args.script, args.args = rest[0], rest[1:]
        return None
    print(f"polyprof: error: {args.script}: polyprof run runs the script itself, in this interpreter "
          f"({sys.executable}): `polyprof run x.py ...` or `polyprof run -m module ...` "
          "(python's own options are not taken)", file=sys.stderr)
    return 2


def _no_module(name: str) -> bool:
    """Whether ``python -m name`` finds no top-level package or module (found without
    importing it: the program's own code runs under the session)."""
    import importlib.util

    sys.path.insert(0, os.getcwd())  # as run_script puts it for -m
    try:
        return importlib.util.find_spec(name.split(".")[0]) is None
    except (ImportError, ValueError):
        return True
    finally:
        sys.path.pop(0)


def _recording_flags(args: argparse.Namespace) -> list[str]:
    """The flags given for a session of the run's own (output, schedule, window...): a run
    that serves has none (a capture records as its client asks, with the plugins given)."""
    from ..collect.options import flag_of, from_arguments  # (as session_options)

    return [flag_of(n) for n in sorted(set(from_arguments(args)) - {"plugins", "collect_timeout", "plugin_options"})]


def _run_serving(args: argparse.Namespace, address: str, how: str) -> int:
    """Run the script with a capture server and no session of its own (``how``: --serve or POLYPROF_SERVE)."""
    from ..capture import serve_address

    unused = _recording_flags(args)
    if unused:  # only with --serve: POLYPROF_SERVE gives way to them (_prepared)
        raise PolyprofError(f"--serve records what a capture client asks for, with the plugins given; "
                            f"{', '.join(unused)} {'applies' if len(unused) == 1 else 'apply'} to a run without it")
    settings = session_options(args)
    server = serve_address(address, plugins=settings.plugins, collect_timeout=settings.collect_timeout)
    why = "" if how == "--serve" else f", as POLYPROF_SERVE={address} in the environment asks: this run writes " \
        "no trace of its own (unset it, or give -o, to record the whole run)"
    print(f"polyprof: serving captures on {server.address} (auth: {server.secured}){why}", file=sys.stderr)
    previous = {s: signal.signal(s, _on_signal) for s in UNWIND if signal.getsignal(s) == signal.SIG_DFL}
    pid = os.getpid()
    _received.clear()
    _freeze_what_polyprof_made()
    code = run_script(args.script, args.args, args.module)  # never raises
    if os.getpid() != pid:  # a forked child came back here: the server is the parent's
        return code
    script_exec.keep_script_main(False)  # (not kept here: the script's module is let go as before)
    server.stop()  # a capture in progress ends now and is answered
    for s, h in previous.items():
        if signal.getsignal(s) == _on_signal:
            signal.signal(s, h)
    if _received:
        _die_like(_received[0])
    return code
