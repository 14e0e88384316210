"""The compiled parsers on hostile bytes (the long run under ASan/UBSan: scripts/fuzz_native.py).

- Every reproducer in tests/data/fuzz_native/ (an input that once crashed, hung or broke a
  compiled parser or its fallback) loads, in a child process under a time limit, with the
  compiled parsers and with their Python fallbacks, to the same Trace or to a
  ``PolyprofError`` from both (not the readers' last net, safety.ForeignError).
- A bounded smoke run (fixed seeds, the normal build, in process): seeded byte-level
  mutations of real files (tests/fuzz/native.py) for each parser family, each input a
  Trace or a ``PolyprofError`` (never the readers' last net, safety.ForeignError), the
  compiled passes past load driven too; where the compiled path and the fallback both
  read an input, the same Trace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from fuzz import native
from fuzz.differential import fallback, fingerprint
from polyprof.errors import PolyprofError
from polyprof.formats.safety import ForeignError

ROOT = Path(__file__).resolve().parents[1]
REPRODUCERS = sorted(p for p in native.REPRODUCERS.iterdir() if not p.name.endswith((".md", ".txt")))

_REPLAY = """
import json, sys
sys.path.insert(0, {tests!r})
import polyprof
from fuzz.differential import fallback, fingerprint
from polyprof.analyze import registry
from polyprof.errors import PolyprofError
from polyprof.formats.safety import ForeignError

def read(path):
    try:
        trace = polyprof.load(path)
        registry.compute_all(trace)  # every table, as summary builds them
        return fingerprint(trace)
    except ForeignError as e:
        return "net: " + repr(e.cause)
    except PolyprofError as e:
        return "error: " + type(e).__name__
path = sys.argv[1]
fast = read(path)
with fallback():
    slow = read(path)
print(json.dumps([fast, slow]))
"""


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.name for p in REPRODUCERS])
def test_each_reproducer_loads_alike_in_time(path):
    code = _REPLAY.format(tests=str(ROOT / "tests"))
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    fast, slow = json.loads(out.stdout.splitlines()[-1])
    assert fast == slow, f"{path.name}: compiled {fast}, fallback {slow}"
    assert not fast.startswith("net"), f"{path.name}: only the readers' last net caught it: {fast}"


def test_occupancy_of_hostile_device_properties_is_unknown():
    """Device properties come from the file (a damaged XSpace gave warpSize 0 and an
    infinite one: summary ended in an internal error)."""
    from polyprof.analyze.occupancy import occupancy

    props = {"warpSize": 32, "maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536,
             "sharedMemPerMultiprocessor": 167936, "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024}
    occ, limit, blocks = occupancy(256, 32, 0, props)
    assert 0 < occ <= 1 and limit and blocks > 0
    for key, bad in [("warpSize", 0), ("warpSize", -32), ("warpSize", float("inf")), ("warpSize", 4096),
                     ("maxThreadsPerMultiprocessor", 0), ("maxThreadsPerBlock", float("inf")),
                     ("regsPerMultiprocessor", "x"), ("computeMajor", float("nan"))]:
        occ, limit, blocks = occupancy(256, 32, 0, props | {key: bad})
        assert occ != occ and (limit, blocks) == ("", 0), (key, bad)


@pytest.fixture(scope="module")
def seeds() -> dict[str, list[tuple[str, bytes]]]:
    return {p: native.load_seeds(p) for p in native.PARSERS}


def _outcome(path: Path, tmp: Path, deep: bool) -> str:
    try:
        trace = polyprof.load(path)
        native.exercise(trace, deep, tmp)
        return fingerprint(trace)
    except ForeignError as e:  # the readers' last net: a check the parser should make itself
        raise AssertionError(f"{path}: only the last net caught {e.cause!r}") from e
    except PolyprofError:
        return "error"


@pytest.mark.parametrize("parser,count", [("kineto", 40), ("perfetto", 150), ("xspace", 100), ("sqlite", 40)])
def test_mutated_inputs_give_a_trace_or_one_error(parser, count, seeds, tmp_path):
    suffix = native.SUFFIX[parser]
    loaded = 0
    for i in range(count):
        src, data = native.mutate(parser, seeds[parser], 20261128, i)
        path = tmp_path / f"input{suffix}"
        path.write_bytes(data)
        got = _outcome(path, tmp_path, deep=i % 20 == 0)
        if parser in ("kineto", "perfetto"):
            with fallback():
                try:
                    slow = fingerprint(polyprof.load(path))
                except PolyprofError:
                    slow = "error"
            assert got == slow, f"{parser} input {i} (from {src}): compiled {got}, fallback {slow}"
        loaded += got != "error"
    assert loaded, f"no {parser} input loaded: the mutations reach no further than the first check"
