#!/usr/bin/env bash
# Install polyprof with everything its tests need, then run the tests.
# torch is pinned first so pip takes the CPU build instead of a multi-GB CUDA one.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all,test]"
# headless Chromium renders the HTML report in its tests (Debian package; best effort)
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 || echo "could not install chromium" >&2
fi
set +e
python -m pytest -q "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then echo "pytest collected no tests: failing CI" >&2; exit 1; fi
exit "$code"
