"""Run mutated inputs through polyprof's readers in worker processes, so that a signal
(SIGSEGV), a hang or a leak of a foreign exception is caught, named and saved.

Each worker is ``python -m fuzz.runner --worker`` (cwd tests/): it reads one request
line ``reader seed index deep`` at a time, regenerates that input (mutators.mutate),
loads it and, for ``deep`` requests whose input loaded, also builds the summary, the
HTML report and every export of the trace. It answers one JSON line per request:

- ``ok``: loaded (and, if deep, summarised, reported and exported);
- ``error``: refused with a ``PolyprofError`` (the promise);
- ``net``: refused, but only by the readers' last net (safety.ForeignError): a check the
  reader should make itself, counted and listed, not a broken promise;
- ``bug``: any other exception (its type, message and the stage);
- ``differs`` (kineto, nsys, rocpd, rpd, vendor_json, perfetto): the compiled readers and their Python/SQL
  fallbacks (differential.py) did not both refuse or read the same trace;
  ``damaged-differs``: the same on an SQLite file SQLite's integrity_check calls
  corrupt (each path checks other things: counted, not a finding);

and the parent adds ``crash`` (the worker died: a signal) and ``hang`` (no answer in
``timeout`` seconds). Inputs of bugs, crashes and hangs are saved to ``save_dir``.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

EXPORTS = {"chrome": ".json.gz", "polyprof": ".polyprof", "xspace": ".xplane.pb", "kineto": ".json"}


# --------------------------------------------------------------------------- worker side
#: readers with compiled paths held to their fallbacks on every input (differential.py)
DIFFERENTIAL = ("kineto", "nsys", "rocpd", "rpd", "vendor_json", "perfetto")


def _differ(path: Path, trace: object) -> str:
    """"" where the fallbacks read ``path`` as the compiled paths did (``trace``, or None
    for a PolyprofError), else what differs."""
    import polyprof
    from polyprof.errors import PolyprofError

    from .differential import fallback, fingerprint

    with fallback():
        try:
            slow: object = polyprof.load(path)
        except PolyprofError as e:
            slow = None
            why = str(e)[:200]
    if trace is None and slow is None:
        return ""
    if trace is None or slow is None:
        what = f"compiled {'refused' if trace is None else 'read'}, fallback {'refused: ' + why if slow is None else 'read'}"
    elif fingerprint(trace) == fingerprint(slow):
        return ""
    else:
        what = "the traces differ"
    return ("damaged: " if _damaged(path) else "") + what


def _damaged(path: Path) -> bool:
    """An SQLite file SQLite itself calls corrupt (integrity_check): the page walk and
    SQLite's VM may each read or refuse it, as each checks different things."""
    import sqlite3

    with open(path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            return False
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return conn.execute("PRAGMA integrity_check(1)").fetchone() != ("ok",)
        finally:
            conn.close()
    except sqlite3.Error:
        return True


def check(path: Path, deep: bool, tmp: Path, reader: str = "") -> tuple[str, str, str]:
    """(outcome, detail, stage) of loading ``path`` (and, if ``deep``, using what loaded);
    for the DIFFERENTIAL readers, also the fallbacks' reading ("differs" where it is not
    the same)."""
    import polyprof
    from polyprof.errors import PolyprofError

    stage = "load"
    try:
        try:
            trace = polyprof.load(path)
        except PolyprofError:
            if reader in DIFFERENTIAL:
                stage = "fallback"
                why = _differ(path, None)
                if why:
                    return "damaged-differs" if why.startswith("damaged: ") else "differs", why, stage
            raise
        if reader in DIFFERENTIAL:
            stage = "fallback"
            why = _differ(path, trace)
            if why:
                return "damaged-differs" if why.startswith("damaged: ") else "differs", why, stage
        if deep:
            import io

            from rich.console import Console

            from polyprof.formats.registry import by_name
            from polyprof.report import html, tables, terminal

            stage = "summary"
            report = tables.build(trace)
            terminal.render(report, console=Console(file=io.StringIO(), width=120))
            tables.to_json(report)
            stage = "report"
            html.write(trace, tmp / "r.html", report)
            for fmt, suffix in EXPORTS.items():
                stage = f"export {fmt}"
                by_name(fmt).write(trace, tmp / f"out{suffix}")
        return "ok", "", stage
    except PolyprofError as e:
        from polyprof.formats.safety import ForeignError

        if isinstance(e, ForeignError):  # kept the promise only through the readers' last net
            return "net", f"{type(e.cause).__name__}: {str(e)[:300]}", stage
        return "error", str(e)[:300], stage
    except BaseException as e:  # noqa: BLE001 - the thing being looked for
        if isinstance(e, KeyboardInterrupt):
            raise
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
        return "bug", f"{type(e).__name__} at {where}: {str(e)[:300]}", stage


def worker() -> None:
    from fuzz import mutators, seeds

    all_seeds = seeds.load_seeds()
    import polyprof.formats.journal  # noqa: F401 - imports done before the clock starts
    import polyprof.formats.kineto  # noqa: F401
    import polyprof.formats.native  # noqa: F401
    import polyprof.formats.xspace  # noqa: F401
    import polyprof.report.html  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="polyprof-fuzz-") as tmpdir:
        tmp = Path(tmpdir)
        sys.stdout.write(f"ready {tmp}\n")  # the parent saves an input left here by a crash or a hang
        sys.stdout.flush()
        for line in sys.stdin:
            reader, seed, index, deep = line.split()
            if reader not in all_seeds:
                all_seeds.update(seeds.load_seeds((reader,)))
            src, data = mutators.mutate(reader, all_seeds[reader], int(seed), int(index))
            suffix = next(s for s in sorted(seeds.READERS[reader], key=len, reverse=True) if src.endswith(s))
            path = tmp / f"input{suffix}"
            path.write_bytes(data)
            t = time.perf_counter()
            outcome, detail, stage = check(path, deep == "1", tmp, reader)
            for p in tmp.iterdir():
                if p.is_file():
                    p.unlink()
            sys.stdout.write(json.dumps({"outcome": outcome, "detail": detail, "stage": stage, "seed_file": src,
                                         "s": round(time.perf_counter() - t, 4)}) + "\n")
            sys.stdout.flush()


# --------------------------------------------------------------------------- parent side
@dataclass
class Result:
    reader: str
    seed: int
    inputs: int = 0
    outcomes: Counter = field(default_factory=Counter)
    findings: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"reader": self.reader, "seed": self.seed, "inputs": self.inputs, "outcomes": dict(self.outcomes),
                "findings": self.findings, "seconds": round(self.seconds, 1)}


class _Worker:
    def __init__(self, env: dict[str, str]):
        t = time.monotonic()
        self.log = tempfile.TemporaryFile()  # the worker's stderr, shown if it fails to start
        self.proc = subprocess.Popen([sys.executable, "-m", "fuzz.runner", "--worker"], cwd=HERE.parent, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1)
        self.job: tuple[int, float] | None = None  # (index, sent at)
        ready = self.proc.stdout.readline().strip().split(" ", 1)  # imports done: "ready TMPDIR"
        self.ready = ready[:1] == ["ready"]
        self.dir = Path(ready[1]) if len(ready) == 2 else None
        self.started = time.monotonic() - t

    def send(self, reader: str, seed: int, index: int, deep: bool) -> None:
        self.proc.stdin.write(f"{reader} {seed} {index} {int(deep)}\n")
        self.proc.stdin.flush()
        self.job = (index, time.monotonic())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()
        if self.dir is not None:  # killed or crashed: its TemporaryDirectory was not cleaned
            shutil.rmtree(self.dir, ignore_errors=True)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(HERE.parent),
                                         *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("POLARS_MAX_THREADS", "1")
    return env


def run(reader: str, seed: int = 0, count: int | None = None, seconds: float | None = None, workers: int = 2,
        deep_every: int = 25, timeout: float = 60.0, save_dir: Path | None = None, start: int = 0,
        progress: bool = False) -> Result:
    """Fuzz ``reader`` with inputs ``start, start+1, ...`` until ``count`` inputs or ``seconds`` pass."""
    assert count is not None or seconds is not None
    res = Result(reader, seed)
    env = _env()
    pool = [_Worker(env) for _ in range(workers)]
    if not all(w.ready for w in pool):
        w = next(w for w in pool if not w.ready)
        w.log.seek(0)
        why = w.log.read().decode(errors="replace")[-2000:]
        for w in pool:
            w.stop()
        raise RuntimeError(f"a fuzz worker did not start (python -m fuzz.runner --worker in tests/): {why}")
    t0 = time.monotonic()  # the budget is for inputs, not start-up
    nxt = start
    stop_at = start + count if count is not None else None

    def more() -> bool:
        return (stop_at is None or nxt < stop_at) and (seconds is None or time.monotonic() - t0 < seconds)

    def record(kind: str, index: int, detail: str, stage: str = "load", left_in: Path | None = None) -> None:
        res.outcomes[kind] += 1
        if kind in ("bug", "crash", "hang", "net", "differs"):
            entry = {"outcome": kind, "index": index, "detail": detail, "stage": stage}
            if save_dir is not None and kind != "net":
                entry["file"] = str(_save(reader, seed, index, kind, save_dir, left_in))
            res.findings.append(entry)

    try:
        for w in pool:
            if more():
                w.send(reader, seed, nxt, deep_every > 0 and nxt % deep_every == 0)
                nxt += 1
        last_report = time.monotonic()
        while any(w.job for w in pool):
            busy = {w.proc.stdout.fileno(): w for w in pool if w.job}
            ready, _, _ = select.select(list(busy), [], [], 1.0)
            now = time.monotonic()
            for fd in ready:
                w = busy[fd]
                index = w.job[0]
                line = w.proc.stdout.readline()
                if line:
                    r = json.loads(line)
                    record(r["outcome"], index, r["detail"], r["stage"])
                else:  # the worker died on this input
                    code = w.proc.wait()
                    record("crash", index, f"worker died with exit status {code}", left_in=w.dir)
                    w.stop()
                    pool[pool.index(w)] = w = _Worker(env)
                    t0 += w.started  # a restart is not fuzzing time
                res.inputs += 1
                w.job = None
                if more():
                    w.send(reader, seed, nxt, deep_every > 0 and nxt % deep_every == 0)
                    nxt += 1
            for i, w in enumerate(pool):
                if w.job and now - w.job[1] > timeout:
                    index = w.job[0]
                    w.proc.kill()
                    w.proc.wait()
                    record("hang", index, f"no answer in {timeout:.0f} s", left_in=w.dir)
                    w.stop()
                    res.inputs += 1
                    pool[i] = w = _Worker(env)
                    t0 += w.started
                    if more():
                        w.send(reader, seed, nxt, deep_every > 0 and nxt % deep_every == 0)
                        nxt += 1
            if progress and now - last_report > 30:
                last_report = now
                last = f"; last finding: {res.findings[-1]['detail'][:160]}" if res.findings else ""
                print(f"{reader}: {res.inputs} inputs, {dict(res.outcomes)}, {now - t0:.0f} s{last}", file=sys.stderr,
                      flush=True)
    finally:
        for w in pool:
            w.stop()
    res.seconds = time.monotonic() - t0
    return res


def _save(reader: str, seed: int, index: int, kind: str, save_dir: Path, left_in: Path | None = None) -> Path:
    """Save an input for the corpus: for a crash or a hang, the file the worker left in
    ``left_in`` (regenerating it here could kill this process too: making the input may
    be what crashed); for a bug, regenerated (it was made once without harm)."""
    save_dir.mkdir(parents=True, exist_ok=True)
    name = f"{reader}-s{seed}-i{index}-{kind}"
    if left_in is not None:
        left = sorted(left_in.glob("input*"))
        if not left:
            return save_dir / f"(not saved: the worker died while making input {index})"
        path = save_dir / (name + left[0].name[len("input"):])
        shutil.copyfile(left[0], path)
        return path
    from fuzz import mutators, seeds

    src, data = mutators.mutate(reader, seeds.load_seeds((reader,) if reader in seeds.BUILT else ())[reader],
                                seed, index)
    suffix = next(s for s in sorted(seeds.READERS[reader], key=len, reverse=True) if src.endswith(s))
    path = save_dir / f"{name}{suffix}"
    path.write_bytes(data)
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker()
