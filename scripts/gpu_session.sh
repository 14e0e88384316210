#!/bin/bash
# Every GPU check of polyprof in one run, for a lent GPU machine (the device tool) or any
# CUDA machine with torch, jax and cupy installed. Logs and tables go to $OUT (or ./gpu_out).
#
#   bash scripts/gpu_session.sh            # about 5 minutes on an H200
#   ONLY="copies compile" bash scripts/gpu_session.sh   # only the steps named (copies compile
#                                          # cupti frameworks scale tests)
#
# Wheels the machine lacks (cupti-python matching its libcupti, nvtx, msgspec...) may be put
# in .whl/ (and .whl/alt/ for a cupti-python 13.0.x, chosen when libcupti is 13.0-13.3):
# they are installed into /tmp/site first. Each step has its own time limit; a failing
# step is reported and the next one runs. (With the device tool, name .whl in `carry`:
# .git/info/exclude keeps it out of git, and an ignored folder travels only when carried.)
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
cd "$(dirname "$0")/.."
T0=$(date +%s)
# step NAME TEXT: false (skipped) unless ONLY is unset or names NAME (ONLY="copies compile")
step() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]] || return 1; echo "--- $(( $(date +%s) - T0 )) s: $2"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 --version
git log --oneline -1 2>/dev/null
if ls .whl/*.whl >/dev/null 2>&1; then
  v=$(python3 -m pip show nvidia-cuda-cupti 2>/dev/null | awk '/^Version/{print $2}')
  case "$v" in  # the cupti-python that matches this libcupti
    13.0*|13.1*|13.2*|13.3*) cw=$(find .whl -path '*/alt/*' -name 'cupti_python-*.whl' | head -1);;
    *) cw=$(find .whl -name 'cupti_python-*.whl' -not -path '*/alt/*' | head -1);;
  esac
  echo "libcupti $v, cupti-python wheel: ${cw:-none}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v cupti_python) $cw || exit 3
  d=/tmp/site/polyprof-0.dev0.dist-info; mkdir -p $d  # polyprof's entry points, without installing it
  printf 'Metadata-Version: 2.1\nName: polyprof\nVersion: 0.dev0\n' > $d/METADATA
  sed -n '/^\[project.entry-points."polyprof.plugins"\]/,/^$/p' pyproject.toml |
    sed 's/^\[project.entry-points."polyprof.plugins"\]/[polyprof.plugins]/; s/"//g' > $d/entry_points.txt
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 150 python3 setup.py build_ext --inplace -q 2>&1 | grep -i error | head -5
python3 -c "from polyprof.plugins.cupti import buffers; print('buffer sink', buffers.IMPLEMENTATION)"
step copies "copies, memory and graph capture against the programs' own counts" && {
timeout 180 python3 scripts/gpu_memory_copies.py /tmp/gpu_copies; echo "copies rc=$?"
cp /tmp/gpu_copies/copies.md "$OUT/" 2>/dev/null
tar -C /tmp/gpu_copies -czf "$OUT/gpu_copies.tar.gz" . 2>/dev/null; }
step compile "FLOPs of bf16 products, torch.compile with CUDA graphs" && {
timeout 300 python3 scripts/gpu_compile_mfu.py /tmp/gpu_compile $COMPILE_PARTS > "$OUT/compile.log" 2>&1
echo "compile rc=$?"
tail -c 6000 "$OUT/compile.log"
tar -C /tmp/gpu_compile -czf "$OUT/gpu_compile.tar.gz" . 2>/dev/null; }
step cupti "cupti check" && {
timeout 200 python3 scripts/gpu_check_cupti.py --repeats 2 --out "$OUT/cupti.md"; echo "cupti check rc=$?"; }
step frameworks "frameworks" && {
timeout 150 python3 scripts/gpu_frameworks.py /tmp/gpu_fw; echo "frameworks rc=$?"
cp /tmp/gpu_fw/frameworks.md "$OUT/" 2>/dev/null; }
step scale "200,000 launches under the cupti plugin" && {
timeout 90 python3 scripts/gpu_cupti_scale.py 200000 cuda host,cupti; echo "scale rc=$?"; }
step tests "tests" && {
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cupti.py tests/test_nvtx.py tests/test_h200_traces.py \
  tests/test_cuda_graphs.py tests/test_cupti_ranges.py tests/test_h200_copies.py 2>&1 | tail -8; }
echo "--- $(( $(date +%s) - T0 )) s: done"
