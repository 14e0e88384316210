"""An OpenCL image pipeline: run with `polyprof run examples/opencl_pipeline.py`."""

from polyprof.demo.opencl_pipeline import main

if __name__ == "__main__":
    raise SystemExit(main())
