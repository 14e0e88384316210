"""Sections in two threads: run with `polyprof run examples/threaded_pipeline.py`."""

from polyprof.demo.threaded_pipeline import main

if __name__ == "__main__":
    raise SystemExit(main())
