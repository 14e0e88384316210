"""Fuzz polyprof's compiled parsers under AddressSanitizer and UBSan (docs/reliability.md).

    python scripts/fuzz_native.py --build                       # ASan+UBSan extensions in build/asan
    python scripts/fuzz_native.py --seconds 600 --seed 1 --save /tmp/found
    python scripts/fuzz_native.py --count 2000 --parsers kineto,perfetto --no-asan

Each parser family (kineto, perfetto, xspace, sqlite: tests/fuzz/native.py) gets seeded
byte-level mutations of real files, loaded in-process by ``polyprof.load`` in a child
Python run on a copy of ``src`` whose extensions are built with
``-fsanitize=address,undefined`` (``--build``; libasan preloaded, leaks not checked),
then driven through the compiled passes that reach past load (args walk, memory
columns, and every ``--deep-every``-th input the tables and the Perfetto and XSpace
writers). Expected per input: a Trace or a ``PolyprofError``. A foreign exception is a
``bug``; an ASan or UBSan report, a signal or an exit is a ``crash``; no answer in
``--timeout`` seconds (faulthandler ends the child) a ``hang``. The child writes each input
to disk before loading it, so the parent saves the one that killed it and starts a new
child at the next index. ``direct-*`` parsers call a compiled pass's own entry point with
damaged bytes, no reader around it (tests/fuzz/native_direct.py). Prints one JSON line
per parser; exits 1 on any finding.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASAN_DIR = ROOT / "build" / "asan"
FLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g"


# --------------------------------------------------------------------------- the sanitized build
def build(where: Path = ASAN_DIR) -> Path:
    """A copy of src/ with every extension built with ASan and UBSan; returns its src."""
    src = where / "src"
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("*.so", "*.stamp", "__pycache__"))
    env = dict(os.environ, CFLAGS=FLAGS, LDFLAGS="-fsanitize=address,undefined")
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--force", "--build-temp", str(where / "tmp"),
                    "--build-lib", str(where / "lib")], cwd=ROOT, env=env, check=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for built in [*(where / "lib").rglob(f"*{suffix}"), *(where / "lib").rglob("*.stamp")]:
        shutil.copyfile(built, src / built.relative_to(where / "lib"))
    return src


def sanitizer_env(src: Path) -> dict[str, str]:
    lib = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return {"PYTHONPATH": f"{src}{os.pathsep}{ROOT / 'tests'}", "LD_PRELOAD": lib,
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


# --------------------------------------------------------------------------- the child
def child(parser: str, seed: int, start: int, stop: int | None, deadline: float, timeout: float, deep_every: int,
          work: Path) -> None:
    """Load inputs ``start...`` until ``stop`` or ``deadline``; one JSON line per finding
    and one at the end. ``work/inflight.idx`` names the input being read."""
    import faulthandler
    import traceback

    sys.path.insert(0, str(ROOT / "tests"))  # its fuzz/ package, not scripts/fuzz.py beside this script
    import polyprof
    from fuzz import native
    from polyprof.errors import PolyprofError

    from fuzz import native_direct

    direct = parser[len("direct-"):] if parser.startswith("direct-") else ""
    seeds = native_direct.load_seeds(direct) if direct else native.load_seeds(parser)
    mutate = partial(native_direct.mutate, direct) if direct else partial(native.mutate, parser)
    impl = implementations()
    counts: Counter = Counter()
    i = start
    while (stop is None or i < stop) and time.time() < deadline:
        src, data = mutate(seeds, seed, i)
        path = work / f"inflight{native.SUFFIX.get(parser, '.bin')}"
        path.write_bytes(data)
        (work / "inflight.idx").write_text(f"{i} {src}")
        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            if direct:
                counts[native_direct.call(direct, data, seed, i)] += 1
            else:
                trace = polyprof.load(path)
                native.exercise(trace, deep_every > 0 and i % deep_every == 0, work)
                counts["ok"] += 1
        except PolyprofError:
            counts["error"] += 1
        except Exception as e:  # noqa: BLE001 - the thing looked for
            counts["bug"] += 1
            tb = traceback.extract_tb(e.__traceback__)[-1]
            print(json.dumps({"outcome": "bug", "index": i, "seed_file": src,
                              "detail": f"{type(e).__name__} at {Path(tb.filename).name}:{tb.lineno}: {e}"[:400]}),
                  flush=True)
        faulthandler.cancel_dump_traceback_later()
        i += 1
    print(json.dumps({"done": i, "counts": dict(counts), "compiled": impl}), flush=True)


def implementations() -> str:
    """Which of the compiled parsers this process uses ("c") or not ("python")."""
    import importlib

    mods = ("formats.kineto.tokenized", "formats.kineto.deferred", "formats.kineto.gather", "formats.kineto.flows",
            "formats.kineto_memory", "formats.perfetto_read.walked", "formats.perfetto_wire", "formats.xspace.decode",
            "formats.sqlite_pages", "analyze.longest_path")
    return " ".join(f"{m.rsplit('.', 1)[1]}={importlib.import_module('polyprof.' + m).IMPLEMENTATION}" for m in mods)


# --------------------------------------------------------------------------- the parent
def _kind(stderr: str) -> str:
    if "Timeout (" in stderr:
        return "hang"
    if "AddressSanitizer" in stderr:
        return "asan"
    if "runtime error:" in stderr:
        return "ubsan"
    return "crash"


def _why(stderr: str) -> str:
    for line in stderr.splitlines():
        if "ERROR: AddressSanitizer" in line or "runtime error:" in line or "Fatal Python" in line:
            return line.strip()[:300]
    return stderr.strip().splitlines()[-1][:300] if stderr.strip() else ""


def fuzz(parser: str, seed: int, count: int | None, seconds: float | None, env: dict[str, str], timeout: float,
         deep_every: int, save: Path | None) -> dict:
    """Run children until ``count`` inputs or ``seconds`` pass; restart after each death."""
    t0 = time.time()
    deadline = t0 + (seconds if seconds is not None else 1e9)
    stop = count
    counts: Counter = Counter()
    findings: list[dict] = []
    nxt = 0
    compiled = ""
    while (stop is None or nxt < stop) and time.time() < deadline:
        with tempfile.TemporaryDirectory(prefix="polyprof-fuzz-native-") as tmp:
            work = Path(tmp)
            cmd = [sys.executable, __file__, "--child", parser, "--seed", str(seed), "--start", str(nxt),
                   "--deadline", str(deadline), "--timeout", str(timeout), "--deep-every", str(deep_every),
                   "--work", tmp] + (["--count", str(stop)] if stop is not None else [])
            with open(work / "stderr", "w+") as err:
                proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
                err.seek(0)
                stderr = err.read()
            last = None
            for line in proc.stdout.splitlines():
                r = json.loads(line)
                if "done" in r:
                    last = r
                else:
                    findings.append(r)
            if last is not None:
                compiled = last["compiled"]
                nxt = last["done"]
                counts.update(last["counts"])
                continue
            if not (work / "inflight.idx").exists():
                raise RuntimeError(f"the {parser} child ended before its first input: {stderr[-3000:]}")
            idx, src = (work / "inflight.idx").read_text().split(" ", 1)
            kind = _kind(stderr)
            entry = {"outcome": kind, "index": int(idx), "seed_file": src, "detail": _why(stderr)}
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                inflight = next(work.glob("inflight.*[!x]"))
                suffix = "".join(inflight.suffixes)
                kept = save / f"{parser}-s{seed}-i{idx}-{kind}{suffix}"
                shutil.copyfile(inflight, kept)
                kept.with_suffix(kept.suffix + ".log").write_text(stderr[-20000:])
                entry["file"] = str(kept)
            findings.append(entry)
            counts[kind] += 1
            nxt = int(idx) + 1
    inputs = sum(counts.values())
    return {"parser": parser, "seed": seed, "inputs": inputs, "outcomes": dict(counts),
            "seconds": round(time.time() - t0, 1), "compiled": compiled, "findings": findings}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="store_true", help=f"build the sanitized extensions in {ASAN_DIR} and exit")
    p.add_argument("--parsers", default="kineto,perfetto,xspace,sqlite",
                   help="readers (kineto, perfetto, xspace, sqlite) and entry points called directly "
                        "(direct-tokens, direct-args, direct-memory, direct-walk, direct-wire)")
    p.add_argument("--count", type=int, help="inputs per parser")
    p.add_argument("--seconds", type=float, help="time per parser")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before an input counts as a hang")
    p.add_argument("--deep-every", type=int, default=10, help="tables and writers every Nth input (0: never)")
    p.add_argument("--no-asan", action="store_true", help="run on the normal build in src/")
    p.add_argument("--save", type=Path, help="directory for inputs that broke a parser")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.seed, args.start, args.count, args.deadline, args.timeout, args.deep_every, args.work)
        return 0
    if args.build:
        print(build())
        return 0
    if args.count is None and args.seconds is None:
        p.error("give --count or --seconds")
    env = dict(os.environ)
    if args.no_asan:
        env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}"
    else:
        if not (ASAN_DIR / "src").is_dir():
            p.error(f"no sanitized build in {ASAN_DIR}: run with --build first")
        env.update(sanitizer_env(ASAN_DIR / "src"))
    env.setdefault("OMP_NUM_THREADS", "1")
    bad = 0
    for parser in args.parsers.split(","):
        res = fuzz(parser, args.seed, args.count, args.seconds, env, args.timeout, args.deep_every, args.save)
        bad += sum(v for k, v in res["outcomes"].items() if k not in ("ok", "error"))
        print(json.dumps({k: v for k, v in res.items() if k != "findings"} | {"findings": len(res["findings"])}),
              flush=True)
        for f in res["findings"][:30]:
            print("   ", json.dumps(f), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
