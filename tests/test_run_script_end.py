"""``polyprof run`` ends a program as python does, and records the work its threads do
after the script returns. Python's end is: the script returns (or raises, or calls
``sys.exit``); ``threading``'s exit hooks end executors' and libraries' threads, the main
thread is shown ended and every non-daemon thread is waited for; then the ``atexit``
callbacks run. ``polyprof run`` (the ``polyprof`` command) lets python do the thread part
itself (``threading._shutdown``, which the interpreter then finds done), stops the session,
and leaves the ``atexit`` callbacks to python's end. Each program here leaves threads
behind and is run both ways: the same output, in the same order, the same exit code, and
no hang. (A wait of polyprof's own, tried before, hung where python does not: threads
stopped by exit hooks, threads that wait for the main thread to end (Dask's worker polls
``main_thread().is_alive()``), a SIGTERM during the wait; docs/reliability.md.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"

#: work left after the script's last line: a non-daemon thread and an atexit callback
TAIL = """\
import atexit, os, signal, sys, threading, time
import polyprof
def worker():
    for i in range(3):
        with polyprof.section("thread_work"):
            time.sleep(0.03)
    print("worker done", flush=True)
def at_exit():
    print("atexit done", flush=True)
atexit.register(at_exit)
threading.Thread(target=worker).start()
with polyprof.section("main_work"):
    time.sleep(0.01)
print("main returns", flush=True)
"""


def _env(*more: Path) -> dict[str, str]:
    """The environment of a program run here: this checkout's polyprof (and ``more``) first."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), *map(str, more), os.environ.get("PYTHONPATH", "")]))


def _run(tmp_path: Path, code: str, ours: bool) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(code)
    env = _env()
    cmd = [sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-o", "t.polyprof"] \
        if ours else [sys.executable]
    try:
        return subprocess.run([*cmd, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{'polyprof run' if ours else 'python'} hung at the end of the program")


@pytest.mark.parametrize("end, code", [("", 0), ("sys.exit(3)", 3), ("raise ValueError('at the end')", 1)])
def test_threads_left_running_end_as_in_python(tmp_path: Path, end: str, code: int) -> None:
    program = TAIL + end + "\n"
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == code
    assert plain.stdout == ours.stdout == "main returns\nworker done\natexit done\n"
    assert ("ValueError: at the end" in ours.stderr) == ("ValueError: at the end" in plain.stderr) == (code == 1)
    assert "trace written to t.polyprof" in ours.stderr
    names = list(polyprof.load(tmp_path / "t.polyprof").names())
    assert names.count("main_work") == 1 and names.count("thread_work") == 3  # the thread's, after the return


@pytest.mark.parametrize("signame, code", [("SIGINT", 0), ("SIGTERM", -15)])
def test_a_signal_while_python_waits_for_the_threads(tmp_path: Path, signame: str, code: int) -> None:
    """Ctrl-C while python waits for the threads ends the wait (its lines, the callbacks
    run, exit code kept); SIGTERM kills the process. The trace holds the thread's work up
    to the signal."""
    program = (TAIL.replace("range(3)", "range(100)").replace("def worker():", "first = threading.Event()\ndef worker():")
               .replace("            time.sleep(0.03)\n", "            time.sleep(0.03)\n        first.set()\n")
               + "def kill():  # once the thread's first section is done and python waits for it\n"
               "    first.wait()\n"
               "    threading.main_thread().join()\n"
               f"    os.kill(os.getpid(), signal.{signame})\n"
               "threading.Thread(target=kill, daemon=True).start()\n")
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == code
    assert plain.stdout == ours.stdout == "main returns\n" + ("atexit done\n" if signame == "SIGINT" else "")
    names = list(polyprof.load(tmp_path / "t.polyprof").names())
    assert names.count("main_work") == 1 and 1 <= names.count("thread_work") < 100
    assert ("KeyboardInterrupt" in ours.stderr) == ("KeyboardInterrupt" in plain.stderr) == (signame == "SIGINT")
    # python 3.13's wait says what interrupts it: not polyprof's own SystemExit of a SIGTERM
    assert "SystemExit" not in ours.stderr and "Traceback" not in ours.stderr.replace(plain.stderr, "")


@pytest.mark.parametrize("executor", ["ThreadPoolExecutor(2)", "ProcessPoolExecutor(1)"])
def test_an_executor_never_shut_down(tmp_path: Path, executor: str) -> None:
    """Its idle non-daemon workers (a process pool's manager thread) wait for work until
    python's exit hook (``threading._register_atexit``) stops them."""
    program = ("import sys\nfrom concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor\n"
               f"if __name__ == '__main__':\n    sys.kept = {executor}\n"
               "    print(sys.kept.submit(abs, -42).result(), flush=True)\n")
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == 0 and plain.stdout == ours.stdout == "42\n"


def test_threads_exit_hooks_stop(tmp_path: Path) -> None:
    """A library's thread stopped by its own exit hook: a bound method (anyio's socket
    selector), a closure holding the thread, a function given the thread's owner."""
    program = """\
import threading
class Selector:
    def __init__(self):
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._stopped.wait)
        self._thread.start()
        threading._register_atexit(self._stop)
    def _stop(self):
        self._stopped.set()
        self._thread.join()
def start():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    def _stop():
        stop.set()
        t.join()
    threading._register_atexit(_stop)
class Owner:
    def __init__(self):
        self.ev = threading.Event()
        self.thread = threading.Thread(target=self.ev.wait)
        self.thread.start()
def _stop_owner(owner):
    owner.ev.set()
    owner.thread.join()
sel = Selector()
start()
threading._register_atexit(_stop_owner, Owner())
print("started", flush=True)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == 0 and plain.stdout == ours.stdout == "started\n"


def test_threads_that_wait_for_the_main_thread_to_end(tmp_path: Path) -> None:
    """Python stops the main thread before it waits for the others: a thread polling
    ``main_thread().is_alive()`` (Dask's worker) or blocked in ``main_thread().join()``
    ends then."""
    # (each line one write: print writes its text and its newline apart, and the two threads
    # print at once when the main thread ends, so a plain run could interleave them)
    program = """\
import atexit, sys, threading, time
def say(*parts):
    sys.stdout.write(" ".join(map(str, parts)) + "\\n")
    sys.stdout.flush()
def poll():
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    say("poller saw the main thread end")
def joiner():
    threading.main_thread().join()
    say("joiner saw the main thread end")
atexit.register(lambda: say("atexit: main alive", threading.main_thread().is_alive()))
threading.Thread(target=poll).start()
threading.Thread(target=joiner).start()
time.sleep(0.1)
say("main returns")
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == 0
    assert sorted(ours.stdout.splitlines()) == sorted(plain.stdout.splitlines()) == sorted([
        "main returns", "poller saw the main thread end", "joiner saw the main thread end",
        "atexit: main alive False"])
    assert ours.stdout.splitlines()[-1] == "atexit: main alive False"


#: a plugin with a non-daemon thread of its own, which only its stop ends
THREADED_PLUGIN = """\
import threading
from polyprof.collect.plugin import Plugin
class Threaded(Plugin):
    name = "threaded"
    default = False
    def _start(self, ctx):
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.done.wait, name="threaded-plugin")
        self.thread.start()
    def _stop(self):
        self.done.set()
        self.thread.join()
    def _collect(self):
        return None
"""


#: the same, its thread (running the plugin's own method) started a moment after the
#: session's start, by a timer
LAZY_PLUGIN = THREADED_PLUGIN.replace("""        self.thread.start()""", """        timer = threading.Timer(0.05, self.thread.start)
        timer.daemon = True
        timer.start()
    def _wait(self):
        self.done.wait()""").replace("target=self.done.wait", "target=self._wait").replace(
    "self.thread.join()", "self.thread.is_alive() and self.thread.join()")

#: a plugin whose stop uses an executor (after python's exit hooks ended the program's)
POOLED_PLUGIN = """\
from concurrent.futures import ThreadPoolExecutor
from polyprof.collect.plugin import Plugin
class Pooled(Plugin):
    name = "pooled"
    default = False
    def _start(self, ctx):
        pass
    def _stop(self):
        with ThreadPoolExecutor(2) as pool:
            self.got = list(pool.map(abs, [-1, -2]))
    def _collect(self):
        import sys
        print("plugin stop:", self.got, file=sys.stderr, flush=True)
        return None
"""


def _run_plugin(tmp_path: Path, plugin: str, name: str, program: str = TAIL) -> subprocess.CompletedProcess[str]:
    (tmp_path / "prog_plugin.py").write_text(plugin)
    script = tmp_path / "prog.py"
    script.write_text(program)
    env = _env(tmp_path)
    try:
        return subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins",
                               f"host,prog_plugin:{name}", "-o", "t.polyprof", str(script)],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("polyprof run hung on a plugin's own thread")


@pytest.mark.parametrize("plugin", [THREADED_PLUGIN, LAZY_PLUGIN], ids=["at_start", "later"])
def test_a_plugins_own_thread_is_not_waited_for(tmp_path: Path, plugin: str) -> None:
    """A non-daemon thread of a plugin's (ended by its stop), started with the session or
    later, would never end before the stop: python's wait is left to python's end, after
    the stop, as before, and nothing hangs (the program's threads are then not waited for)."""
    r = _run_plugin(tmp_path, plugin, "Threaded")
    assert r.returncode == 0 and r.stdout == "main returns\nworker done\natexit done\n", r.stderr
    assert list(polyprof.load(tmp_path / "t.polyprof").names()).count("main_work") == 1


def test_a_plugins_stop_can_use_an_executor_after_the_threads_end(tmp_path: Path) -> None:
    """python's exit hooks (run by the thread wait) close ``concurrent.futures`` to new
    work; a plugin's stop after them still gets an executor's results."""
    r = _run_plugin(tmp_path, POOLED_PLUGIN, "Pooled")
    assert r.returncode == 0 and "plugin stop: [1, 2]" in r.stderr, r.stderr
    assert "failed in stop" not in r.stderr


def test_threads_keep_the_scripts_argv_and_path(tmp_path: Path) -> None:
    """After the script returns, its threads and ``atexit`` callbacks see its
    ``sys.argv`` and import modules beside it, as under python."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper_mod.py").write_text("X = 1\n")
    program = """\
import atexit, sys, threading
def worker():
    threading.main_thread().join()
    import helper_mod
    print("thread", sys.argv[1:], helper_mod.X, flush=True)
threading.Thread(target=worker).start()
atexit.register(lambda: print("atexit", sys.argv[1:], flush=True))
"""
    (app / "prog.py").write_text(program)
    env = _env()
    runs = [subprocess.run([*cmd, "app/prog.py", "a1"], capture_output=True, text=True, cwd=tmp_path, env=env,
                           timeout=60)
            for cmd in ([sys.executable], [sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                                           "-o", "t.polyprof"])]
    assert runs[0].stdout == runs[1].stdout == "thread ['a1'] 1\natexit ['a1']\n", runs[1].stderr
    assert runs[0].returncode == runs[1].returncode == 0


def test_ctrl_c_flushes_the_programs_log_handlers(tmp_path: Path) -> None:
    """After Ctrl-C python runs every ``atexit`` callback, ``logging.shutdown`` too
    (a MemoryHandler's records reach its file), then dies by SIGINT: so does polyprof."""
    program = """\
import logging, logging.handlers, os, signal
mem = logging.handlers.MemoryHandler(capacity=1000, target=logging.FileHandler(os.environ["LOGFILE"]))
log = logging.getLogger("app"); log.addHandler(mem); log.setLevel(logging.INFO)
log.info("step 1 done")
os.kill(os.getpid(), signal.SIGINT)
"""
    results = []
    for ours in (False, True):
        logfile = tmp_path / f"log{int(ours)}.txt"
        os.environ["LOGFILE"] = str(logfile)
        try:
            r = _run(tmp_path, program, ours)
        finally:
            del os.environ["LOGFILE"]
        results.append((r.returncode, logfile.read_text() if logfile.exists() else None))
    assert results[0] == results[1] == (-2, "step 1 done\n")


def test_main_in_a_program_leaves_its_threads_alone(tmp_path: Path) -> None:
    """``polyprof.cli.main(["run", ...])`` called in a program returns to it: the
    program's main thread is not shown ended and its executors still take work."""
    (tmp_path / "prog.py").write_text("print('script ran', flush=True)\n")
    host = tmp_path / "host.py"
    host.write_text("""\
import threading
from concurrent.futures import ThreadPoolExecutor
from polyprof.cli import main
pool = ThreadPoolExecutor(1)
pool.submit(abs, 1).result()
rc = main(["run", "--no-summary", "--plugins", "host", "-o", "t.polyprof", "prog.py"])
print("rc", rc, "main alive", threading.main_thread().is_alive(), "pool", pool.submit(abs, -7).result(), flush=True)
""")
    env = _env()
    r = subprocess.run([sys.executable, str(host)], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == "script ran\nrc 0 main alive True pool 7\n", r.stderr


def test_a_signal_that_ends_the_script_does_not_wait_for_its_threads(tmp_path: Path) -> None:
    """SIGTERM kills python at once, its threads' work undone: ``polyprof run`` unwinds the
    script, writes the trace and dies by it without waiting for the threads first (a
    second SIGTERM, or the SIGKILL after a grace period, would have lost the trace)."""
    program = """\
import os, signal, threading, time
def worker():
    time.sleep(10)
    print("worker done", flush=True)
threading.Thread(target=worker).start()
print("main", flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(10)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == -15
    assert plain.stdout == ours.stdout == "main\n", ours.stdout
    assert "trace written to t.polyprof" in ours.stderr


def test_an_exit_hook_that_raises_runs_once(tmp_path: Path) -> None:
    """An exception in ``threading``'s end (an exit hook's, or Ctrl-C's) is said once and
    the end goes on without it, as python calls ``threading._shutdown`` once: its exit
    hooks are not run again, nor the threads waited for, at python's end."""
    program = """\
import atexit, threading, time
def worker():
    time.sleep(2)
    print("worker done", flush=True)
threading.Thread(target=worker).start()
calls = []
def hook():
    calls.append(1)
    print("hook", len(calls), flush=True)
    raise RuntimeError("the hook fails")
threading._register_atexit(hook)
atexit.register(lambda: print("atexit", flush=True))
print("main returns", flush=True)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == 0
    assert plain.stdout == ours.stdout == "main returns\nhook 1\natexit\n", ours.stdout
    assert plain.stderr.count("RuntimeError: the hook fails") == ours.stderr.count("RuntimeError: the hook fails") == 1


@pytest.mark.parametrize("module", [False, True])
def test_main_is_the_scripts_module_to_the_end(tmp_path: Path, module: bool) -> None:
    """After the script returns, ``__main__`` is still its module under python: its
    threads and ``atexit`` callbacks pickle its classes by name and ``import __main__``
    (before: polyprof's own ``__main__``, ``PicklingError: ... attribute lookup Point on
    __main__ failed``). The same for ``-m``. A script's has no ``__file__`` by then."""
    (tmp_path / "prog.py").write_text("""\
import atexit, pickle, threading
class Point:
    def __init__(self, x):
        self.x = x
def worker():
    threading.main_thread().join()  # the script has returned
    import __main__
    print("thread", hasattr(__main__, "Point"), pickle.loads(pickle.dumps(Point(3))).x, flush=True)
    print("__file__", hasattr(__main__, "__file__"), "__cached__" in vars(__main__), flush=True)
threading.Thread(target=worker).start()
atexit.register(lambda: print("atexit", pickle.loads(pickle.dumps(Point(4))).x, flush=True))
""")
    env = _env()
    target = ["-m", "prog"] if module else ["prog.py"]
    plain = subprocess.run([sys.executable, *target], capture_output=True, text=True, cwd=tmp_path, env=env,
                           timeout=60)
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-o",
                           "t.polyprof", *target], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert plain.returncode == ours.returncode == 0, ours.stderr
    kept = module  # python takes a script's __file__ and __cached__ away once it has run, not a module's
    assert plain.stdout == ours.stdout == f"thread True 3\n__file__ {kept} {kept}\natexit 4\n", ours.stderr


def test_an_exception_in_threadings_end_goes_to_the_programs_unraisablehook(tmp_path: Path) -> None:
    """The interpreter says an exception out of ``threading._shutdown`` through
    ``sys.unraisablehook``: a program's own hook gets it under ``polyprof run`` too, and
    python's default one says it in this python's words (before: polyprof's own text,
    3.11's, on stderr; ``KeyboardInterrupt`` without python's ``: ``)."""
    program = """\
import sys, threading
def hook():
    raise RuntimeError("the hook fails")
threading._register_atexit(hook)
if len(sys.argv) < 2:
    sys.unraisablehook = lambda a: print("hook:", a.exc_type.__name__, a.exc_value, a.err_msg,
                                         a.object is threading, a.exc_traceback.tb_frame.f_code.co_name, flush=True)
print("main returns", flush=True)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == 0
    assert plain.stdout == ours.stdout, ours.stderr
    words = "None True" if sys.version_info < (3, 13) else "Exception ignored on threading shutdown False"
    assert ours.stdout == f"main returns\nhook: RuntimeError the hook fails {words} _shutdown\n"
    script = tmp_path / "prog.py"  # python's own hook: the same text
    env = _env()
    plain, ours = (subprocess.run([*cmd, str(script), "default"], capture_output=True, text=True, cwd=tmp_path,
                                  env=env, timeout=60)
                   for cmd in ([sys.executable], [sys.executable, "-m", "polyprof", "run", "--no-summary",
                                                  "--plugins", "host", "-o", "t.polyprof"]))
    said = [line for line in ours.stderr.splitlines() if not line.startswith("polyprof: ")]
    assert said == plain.stderr.splitlines() and "RuntimeError: the hook fails" in said, ours.stderr


def test_ctrl_c_runs_the_atexit_callbacks_then_dies_by_sigint(tmp_path: Path) -> None:
    """A KeyboardInterrupt out of the script: python says it, waits for the threads, runs
    the ``atexit`` callbacks (a checkpoint saved, a logger's run finished), then dies by
    SIGINT. Before, ``polyprof run`` died by SIGINT right after the trace was written, and
    the callbacks never ran."""
    program = """\
import atexit, os, signal, threading, time
def worker():
    time.sleep(0.2)
    print("worker done", flush=True)
atexit.register(lambda: print("atexit done", flush=True))
threading.Thread(target=worker).start()
print("main", flush=True)
os.kill(os.getpid(), signal.SIGINT)
time.sleep(10)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == -2
    assert plain.stdout == ours.stdout == "main\nworker done\natexit done\n", ours.stderr
    assert "KeyboardInterrupt" in plain.stderr and "KeyboardInterrupt" in ours.stderr
    assert "trace written to t.polyprof" in ours.stderr


def test_sigterm_while_python_waits_after_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C ends the script, python waits for its threads, and a SIGTERM then kills it
    by SIGTERM (before: ``polyprof run`` died by the first signal it saw, SIGINT)."""
    program = """\
import os, signal, threading, time
def worker():
    threading.main_thread().join()  # python's wait for the threads has begun
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
threading.Thread(target=worker).start()
os.kill(os.getpid(), signal.SIGINT)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == -15, ours.stderr
    assert "trace written to t.polyprof" in ours.stderr
