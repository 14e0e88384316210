"""Fuzzing polyprof's readers: structure-aware mutators (mutators.py), seeds of real
traces (seeds.py) and a crash-isolating runner (runner.py), used by the bounded CI run
(tests/test_fuzz_readers.py) and the long run (scripts/fuzz.py)."""
