"""Coverage-guided fuzzing of one reader with atheris (libFuzzer for Python).

    python scripts/fuzz_atheris.py kineto -max_total_time=600 -rss_limit_mb=4096 CORPUS_DIR
    python scripts/fuzz_atheris.py journal -runs=20000
    python scripts/fuzz_atheris.py nsys -max_total_time=300 CORPUS_DIR   (SQLite: seeds built at start)

libFuzzer keeps the inputs that reach new code in CORPUS_DIR (start it empty: the seeds
of tests/data/corpus/seeds are added) and mutates those, half the time with polyprof's
structure-aware mutators (tests/fuzz/mutators.py), half with its own byte-level ones.
Any exception other than a PolyprofError, and any signal, stops the run with the input
saved as ``crash-*`` (libFuzzer's way). The reader modules are instrumented; the rest of
the interpreter is not.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

import atheris  # noqa: E402

from fuzz import mutators, seeds  # noqa: E402

with atheris.instrument_imports(include=["polyprof"]):
    import polyprof  # noqa: E402
    import polyprof.formats.journal  # noqa: E402,F401
    import polyprof.formats.kineto  # noqa: E402,F401
    import polyprof.formats.native  # noqa: E402,F401
    import polyprof.formats.nsys  # noqa: E402,F401
    import polyprof.formats.nsys_csv.reader  # noqa: E402,F401
    import polyprof.formats.parquet  # noqa: E402,F401
    import polyprof.formats.perfetto_read  # noqa: E402,F401
    import polyprof.formats.rocprof_csv  # noqa: E402,F401
    import polyprof.formats.rocprof_json  # noqa: E402,F401
    import polyprof.formats.rocprof_v1_csv  # noqa: E402,F401
    import polyprof.formats.torch_memory_timeline  # noqa: E402,F401
    import polyprof.formats.rocpd  # noqa: E402,F401
    import polyprof.formats.sqlite_db  # noqa: E402,F401
    import polyprof.formats.sqlite_pages  # noqa: E402,F401
    import polyprof.formats.xspace  # noqa: E402,F401
    from polyprof.errors import PolyprofError  # noqa: E402

READER = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in seeds.READERS else "kineto"
SEEDS = seeds.load_seeds((READER,) if READER in seeds.BUILT else ())[READER]
OTHERS = [d for _, d in SEEDS]
SUFFIX = max(seeds.READERS[READER], key=len) if READER in ("native", "journal") else seeds.READERS[READER][0]
TMP = Path(tempfile.mkdtemp(prefix="polyprof-atheris-"))


def test_one_input(data: bytes) -> None:
    suffix = ".json.gz" if READER == "kineto" and data[:2] == b"\x1f\x8b" else SUFFIX
    path = TMP / f"input{suffix}"
    path.write_bytes(data)
    try:
        polyprof.load(path)
    except PolyprofError:
        pass


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    if rnd.random() < 0.5:
        try:
            out = mutators.MUTATORS[READER](data, rnd, OTHERS)
            return out[:max_size]
        except Exception:  # noqa: BLE001 - not parseable by the structured mutator: libFuzzer's own
            pass
    return atheris.Mutate(data, max_size)


def main() -> None:
    dirs = [a for a in sys.argv[1:] if not a.startswith("-")]
    if dirs:  # an empty corpus directory starts from the real seeds
        d = Path(dirs[0])
        d.mkdir(parents=True, exist_ok=True)
        if not any(d.iterdir()):
            for name, data in SEEDS:
                (d / name).write_bytes(data)
    if not any(a.startswith("-max_len") for a in sys.argv):
        sys.argv.append(f"-max_len={max(len(d) for d in OTHERS) * 2}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    atheris.Setup(sys.argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
