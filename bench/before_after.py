"""The same user commands from two trees, paired: did this round slow anything down?

Issue 27 asks that every ratio in docs/benchmarks.md still hold after the redesign, with
the benchmarks rerun before and after in the same runs. This runs the commands users
run — ``summary`` (terminal and ``--json``), ``report``, ``export`` to Perfetto and
XSpace, ``convert`` to a store and ``summary`` of it, ``run`` of an empty script — as
whole processes from a *before* tree (a checkout of an earlier commit with its
extensions built in place: ``git worktree add --detach ../before COMMIT && (cd
../before && python setup.py build_ext --inplace -q)``) and from this tree, alternating
which goes first round by round, on every trace in tests/data/traces. Each child's
wall time, CPU time and peak RSS come from GNU ``time`` (bench/whole_process.py's
``measure``). Printed per command: after/before min and median of the per-round
ratios (below 1: this tree is faster or smaller), and the load average.

    python bench/before_after.py --before ../before --rounds 3
    python bench/before_after.py --before ../before --rounds 3 --only v100,run

``--script "NAME ARGS"`` instead runs one of bench/'s own scripts, as written in this
tree, against both trees, alternating which goes first round by round, and prints each
run's output whole (each script prints its own min and median ratios, against its peer
where it has one). The before side runs the script from a *shadow root*: a copy of this
tree's bench/ beside the before tree's src/, include/ and examples/ (linked), so a
script's ``ROOT / "src"`` is the before tree's code; tests/ (the traces, the helpers
that make inputs) is this tree's on both sides, so both read the same inputs. A script
that did not exist in the before tree runs the same way. ``--own-script`` runs the before
tree's own copy of the script from the before tree instead (for a script whose imports
moved during the round); both copies must take the arguments given.

    python bench/before_after.py --before ../before --rounds 2 --script "markers.py --n 100000 --repeat 5"
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from child_env import child_env
from whole_process import measure

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"


def commands(tmp: Path, tag: str) -> list[tuple[str, list[str]]]:
    """(label, polyprof arguments) for every command on every trace; outputs under
    ``tmp/tag`` so the two trees never write one file."""
    out = tmp / tag
    out.mkdir(exist_ok=True)
    todo: list[tuple[str, list[str]]] = []
    files = sorted(TRACES.glob("kineto/*.json.gz")) + sorted(TRACES.glob("xspace/*.xplane.pb"))
    for f in files:
        name = f.name.split(".")[0]
        todo += [(f"summary {name}", ["summary", str(f)]),
                 (f"summary --json {name}", ["summary", "--json", str(f)]),
                 (f"report {name}", ["report", str(f), "-o", str(out / f"{name}.html")]),
                 (f"export perfetto {name}", ["export", str(f), "-f", "perfetto", "-o",
                                              str(out / f"{name}.pftrace")]),
                 (f"export xspace {name}", ["export", str(f), "-f", "xspace", "-o",
                                            str(out / f"{name}.xplane.pb")])]
    ranks = [TRACES / "kineto" / "sampled_rank0.json.gz", TRACES / "kineto" / "sampled_rank1.json.gz"]
    store = out / "job.store"
    todo += [("convert sampled ranks", ["convert", *map(str, ranks), "-o", str(store), "--overwrite"]),
             ("summary of the store", ["summary", str(store)])]
    empty = tmp / "empty.py"
    empty.write_text("pass\n")
    todo.append(("run empty script", ["run", "--no-summary", "-o", str(out / "empty.polyprof"), str(empty)]))
    return todo


def shadow_root(before: Path, tmp: Path) -> Path:
    """A root whose bench/ is this tree's copy and whose src/, include/ and examples/ are
    the before tree's (linked); tests/ is this tree's. A script's ``ROOT / "src"`` there
    is the before tree's code."""
    root = tmp / "before-root"
    root.mkdir()
    shutil.copytree(ROOT / "bench", root / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("src", "include", "examples"):
        (root / name).symlink_to(before / name)
    (root / "tests").symlink_to(ROOT / "tests")
    return root


def run_script(script: str, before: Path, rounds: int, timeout: float, own: bool = False) -> int:
    """``script`` ("NAME ARGS") from both trees, ``rounds`` times each, alternating which
    goes first; every run's output printed whole, with its wall time and the load average
    at its start and end. ``own``: the before side runs the before tree's copy."""
    name, *args = shlex.split(script)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="polyprof-ba-") as d:
        roots = {"before": before if own else shadow_root(before, Path(d)), "after": ROOT}
        for r in range(rounds):
            for tag in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                root = roots[tag]
                load0, t0 = os.getloadavg()[0], time.perf_counter()
                try:
                    p = subprocess.run([sys.executable, str(root / "bench" / name), *args], cwd=ROOT,
                                       env=child_env(str(root / "src")), capture_output=True, text=True,
                                       timeout=timeout)
                    out, rc = p.stdout + p.stderr, p.returncode
                except subprocess.TimeoutExpired as e:
                    out, rc = f"{e.stdout or ''}{e.stderr or ''}\n(timed out after {timeout:.0f} s)", -1
                failed += rc != 0
                print(f"=== {tag} (round {r + 1}, src {root / 'src'}): {time.perf_counter() - t0:.1f} s, rc {rc}, "
                      f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}\n{out.rstrip()}", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, type=Path, help="the earlier tree (extensions built in place)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated substrings of the command labels to run")
    ap.add_argument("--script", help='instead: one bench/ script with its arguments ("NAME ARGS"), from both trees')
    ap.add_argument("--timeout", type=float, default=900, help="with --script: seconds per run (default 900)")
    ap.add_argument("--own-script", action="store_true", help="with --script: the before tree runs its own copy")
    a = ap.parse_args(argv)
    if a.script:
        return run_script(a.script, a.before.resolve(), a.rounds, a.timeout, a.own_script)
    trees = {"before": child_env(str(a.before.resolve() / "src")), "after": child_env(str(ROOT / "src"))}
    load0 = os.getloadavg()
    worst: list[float] = []
    with tempfile.TemporaryDirectory(prefix="polyprof-ba-") as d:
        tmp = Path(d)
        cmds = {tag: commands(tmp, tag) for tag in trees}
        for i, (label, _) in enumerate(cmds["after"]):
            if a.only and not any(k in label for k in a.only.split(",")):
                continue
            got: dict[str, list[dict[str, float]]] = {tag: [] for tag in trees}
            for r in range(a.rounds + 1):  # round 0: warm-up, untimed
                order = list(trees) if r % 2 else list(trees)[::-1]
                for tag in order:
                    m = measure([sys.executable, "-m", "polyprof", *cmds[tag][i][1]], trees[tag])
                    if r:
                        got[tag].append(m)
            ratio = {k: [x[k] / y[k] for x, y in zip(got["after"], got["before"])] for k in ("wall", "cpu", "rss")}
            worst.append(statistics.median(ratio["cpu"]))
            print(f"{label:40s} before cpu {statistics.median(m['cpu'] for m in got['before']):6.2f} s "
                  f"rss {statistics.median(m['rss'] for m in got['before']):5.0f} MiB | after/before wall "
                  f"{min(ratio['wall']):.2f} / {statistics.median(ratio['wall']):.2f}, cpu {min(ratio['cpu']):.2f} / "
                  f"{statistics.median(ratio['cpu']):.2f}, rss {statistics.median(ratio['rss']):.2f}", flush=True)
        shutil.rmtree(tmp / "before", ignore_errors=True)
    load1 = os.getloadavg()
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}; {a.rounds} rounds, alternating; "
          f"median cpu ratio over commands {statistics.median(worst):.2f}, highest {max(worst):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
