#!/usr/bin/env bash
# Install polyprof with everything its tests need, then run the tests.
# torch is pinned first so pip takes the CPU build instead of a multi-GB CUDA one.
#
# Two system packages make more tests run; on Debian/Ubuntu, as root, this script installs
# them and says so (POLYPROF_TEST_APT=0: never). Without them those tests are skipped,
# each with its reason in the test summary:
#   pocl-opencl-icd  a PoCL that compiles OpenCL kernels on CPUs the PoCL bundled with the
#                    pyopencl wheel cannot (its LLVM 14 does not know e.g. AMD Zen 5:
#                    "unknown target CPU 'generic'"); tests/conftest.py uses whichever
#                    OpenCL device compiles
#   chromium         renders the HTML report in its tests (headless)
#
# The tests run in POLYPROF_TEST_WORKERS processes (pytest-xdist; default 2, 1: in this
# process alone): on 2 cores the suite takes about half the time of one process (17
# against 36 minutes here); each test then shares the cores with another, as on a busy
# machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all,test]"

missing=()
dpkg -s pocl-opencl-icd >/dev/null 2>&1 || missing+=(pocl-opencl-icd)
command -v chromium >/dev/null || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "${POLYPROF_TEST_APT:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: installing ${missing[*]} with apt-get (POLYPROF_TEST_APT=0 to skip)" >&2
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          "${missing[@]}") >/dev/null 2>&1; then
      echo "scripts/test.sh: could not install ${missing[*]}; the tests that need them will be skipped" >&2
    fi
  else
    echo "scripts/test.sh: not installing ${missing[*]} (needs root and apt-get);" \
         "the tests that need them will be skipped if nothing else provides them" >&2
  fi
fi

# The bytecode of polyprof's modules, written once here: where PYTHONDONTWRITEBYTECODE is
# set (some CI and sandbox machines) nothing else writes it, and each of the thousands of
# processes the tests start (CLI runs, scripts, torchrun ranks) would compile the modules
# it imports again (a `polyprof summary` 0.7 s instead of 0.35 s here); with it the suite
# took 1060 s instead of 1148 s on 2 cores.
python -m compileall -q src/polyprof >/dev/null

set +e
workers=${POLYPROF_TEST_WORKERS:-2}
if [ "$workers" = 1 ]; then python -m pytest -q "$@"; else python -m pytest -q -n "$workers" "$@"; fi
code=$?
set -e
if [ "$code" -eq 5 ]; then echo "pytest collected no tests: failing CI" >&2; exit 1; fi
exit "$code"
