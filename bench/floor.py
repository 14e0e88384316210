"""Where a ``polyprof summary FILE`` process's CPU goes before any work: the floor.

Per trace, four whole processes per round, alternating their order, each timed by
``wait4`` (user + system CPU of every thread):

1. ``python`` of an empty script: the interpreter and this machine's ``site``;
2. NumPy imported as the summary imports it (``lowlevel/blas.py``: one OpenBLAS thread);
3. every module a summary of that trace imports, in the order it imported them (read
   from a summary run in a child beforehand), and nothing run;
4. the summary itself (``python -m polyprof summary FILE``).

So (2) - (1) is NumPy, (3) - (2) the rest of the imports (polyprof's own modules and
the libraries they use), and (4) - (3) the work: the read, the analyses and the
render. Each child ends as a summary does, without the interpreter's teardown
(``lowlevel.exit.quick_exit``), so the steps differ only in what they import and run. Set beside HTA's CPU for the trace (``bench/whole_process.py``), it shows how
much of 10x HTA the floor alone takes.

    python bench/floor.py --rounds 7
    python bench/floor.py --rounds 7 --only triton,v100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from child_env import child_env
from timed_child import run

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto"
XSPACE = [ROOT / "tests" / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb",
          *sorted((ROOT / "tests" / "data" / "peers" / "tracelens").glob("*.xplane.pb"))]

#: the child that lists what a summary imports (in import order) into a file
LIST_MODULES = """
import contextlib, io, sys
from polyprof.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["summary", sys.argv[1]]) == 0
open(sys.argv[2], "w").write("\\n".join(m for m in sys.modules if not m.startswith("__")))
"""
#: what ends each child as a summary ends: without the interpreter's teardown
#: (lowlevel/exit.py; the teardown of a process with a summary's modules is ~10 ms)
QUICK_EXIT = "from polyprof.lowlevel.exit import quick_exit\nquick_exit(0)\n"
#: the child that imports NumPy as a summary does (the cyclic collector paused, as
#: ``cli.main`` pauses it for a summary: lowlevel/heap.py)
NUMPY = "import gc\ngc.disable()\nfrom polyprof.lowlevel import blas\nblas.import_numpy_single_threaded()\n"
#: the child that imports a summary's modules (NumPy first, as a summary does)
IMPORTS = NUMPY + """
import importlib, sys
for name in open(sys.argv[1]).read().split():
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception:  # a module a package removes from sys.modules, or one only a run makes
            pass
""" + QUICK_EXIT

STEPS = ("python", "numpy", "imports", "summary")


def _script(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.py"
    path.write_text(text)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", help="comma-separated substrings of the traces to run")
    args = ap.parse_args(argv)
    env = child_env(str(ROOT / "src"))
    traces = [*sorted(KINETO.glob("*.json.gz")), *XSPACE]
    if args.only:
        traces = [t for t in traces if any(k in t.name for k in args.only.split(","))]
    load0 = os.getloadavg()
    print(f"CPU ms (user + sys), min / median of {args.rounds} rounds; load average {load0[0]:.2f}")
    print(f"{'trace':34s} {'python':>13s} {'+numpy':>13s} {'+imports':>13s} {'+work':>13s} {'summary':>13s}")
    with tempfile.TemporaryDirectory(prefix="polyprof-floor-") as tmp:
        folder = Path(tmp)
        empty, numpy_only = _script(folder, "empty", QUICK_EXIT), _script(folder, "numpy_only", NUMPY + QUICK_EXIT)
        lister, importer = _script(folder, "lister", LIST_MODULES), _script(folder, "importer", IMPORTS)
        for trace in traces:
            modules = folder / "modules.txt"
            run([lister, str(trace), str(modules)], env)
            argvs = {"python": [empty], "numpy": [numpy_only], "imports": [importer, str(modules)],
                     "summary": ["-m", "polyprof", "summary", str(trace)]}
            cpu: dict[str, list[float]] = {s: [] for s in STEPS}
            for r in range(args.rounds + 1):  # round 0: an untimed warm-up of each
                for step in (STEPS if r % 2 else STEPS[::-1]):
                    _, seconds, _ = run(argvs[step], env)
                    if r:
                        cpu[step].append(seconds * 1e3)
            lo = {s: min(v) for s, v in cpu.items()}
            med = {s: statistics.median(v) for s, v in cpu.items()}
            cells = [f"{lo['python']:5.1f} / {med['python']:5.1f}"]
            for a, b in zip(STEPS, STEPS[1:]):
                cells.append(f"{lo[b] - lo[a]:5.1f} / {med[b] - med[a]:5.1f}")
            cells.append(f"{lo['summary']:5.1f} / {med['summary']:5.1f}")
            print(f"{trace.name[:34]:34s} " + " ".join(f"{c:>13s}" for c in cells), flush=True)
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
