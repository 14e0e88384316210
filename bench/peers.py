"""polyprof against HTA on TensorBoard's torch-plugin resnet50 samples, whole processes.

The samples (tests/data/peers/tb_plugin, torch 1.8 Kineto traces: string tids, int
flows) are written out once as the ``.pt.trace.json.gz`` files tb_plugin shipped. Each
round runs, for each sample, one ``polyprof summary FILE`` process and one HTA process
(``TraceAnalysis(trace_dir=DIR)``, then ``get_temporal_breakdown`` and
``get_gpu_kernel_breakdown``, ``visualize=False``), alternating which goes first; each is
timed from spawn to exit (imports included), as a user runs it. Printed: min and median
seconds of each, the min and median of the per-round ratios HTA / polyprof, and the load
average before and after.

    python bench/peers.py                 # 5 rounds
    python bench/peers.py --repeat 9 --json

HTA runs in this interpreter if it has ``hta``, else --hta-python / $POLYPROF_HTA_PYTHON.
One untimed warm-up process per tool runs first (bytecode caches, see child_env.py).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "data" / "peers" / "tb_plugin"

_HTA = r"""
import io, sys, logging, warnings, contextlib
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
with contextlib.redirect_stdout(io.StringIO()):
    a = TraceAnalysis(trace_dir=sys.argv[1])
    tb = a.get_temporal_breakdown(visualize=False)
    kb = a.get_gpu_kernel_breakdown(visualize=False)
print(float(tb["idle_time_pctg"].iloc[0]))
"""


def hta_python(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("POLYPROF_HTA_PYTHON")):
        if cand and Path(cand).exists():
            return cand
    import importlib.util

    return sys.executable if importlib.util.find_spec("hta") else None


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    dt = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {p.stderr[-2000:]}")
    return dt


def samples(tmp: Path) -> list[Path]:
    """Each sample as the gzipped JSON tb_plugin shipped, in a directory of its own (HTA
    reads a directory of rank traces)."""
    out = []
    for xz in sorted(SAMPLES.glob("*.pt.trace.json.xz")):
        d = tmp / xz.name.split(".")[0]
        d.mkdir()
        f = d / xz.name[len(d.name) + 1:].replace(".json.xz", ".json.gz")
        f.write_bytes(gzip.compress(lzma.decompress(xz.read_bytes()), 6))
        out.append(f)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hta-python", help="interpreter with holistictraceanalysis installed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    hta = hta_python(args.hta_python)
    if hta is None:
        print("HTA not found (--hta-python); nothing to compare", file=sys.stderr)
        return 1
    env = child_env(str(ROOT / "src"))
    hta_env = child_env(None)
    load0 = os.getloadavg()
    result: dict = {"load_before": load0, "samples": {}}
    with tempfile.TemporaryDirectory(prefix="polyprof-peers-") as tmp:
        files = samples(Path(tmp))
        poly = lambda f: [sys.executable, "-m", "polyprof", "summary", str(f)]  # noqa: E731
        hta_cmd = lambda f: [hta, "-c", _HTA, str(f.parent)]  # noqa: E731
        timed(poly(files[0]), env), timed(hta_cmd(files[0]), hta_env)  # warm-up, untimed
        for f in files:
            pt, ht = [], []
            for r in range(args.repeat):
                if r % 2:
                    ht.append(timed(hta_cmd(f), hta_env))
                    pt.append(timed(poly(f), env))
                else:
                    pt.append(timed(poly(f), env))
                    ht.append(timed(hta_cmd(f), hta_env))
            ratios = [h / p for h, p in zip(ht, pt)]
            result["samples"][f.name] = {
                "polyprof_s": {"min": min(pt), "median": statistics.median(pt)},
                "hta_s": {"min": min(ht), "median": statistics.median(ht)},
                "ratio": {"min": min(ratios), "median": statistics.median(ratios)}}
    result["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {result['load_after'][0]:.2f} {result['load_after'][1]:.2f} {result['load_after'][2]:.2f}")
    for name, r in result["samples"].items():
        print(f"{name}: polyprof summary min {r['polyprof_s']['min']:.2f} s median {r['polyprof_s']['median']:.2f} s; "
              f"HTA min {r['hta_s']['min']:.2f} s median {r['hta_s']['median']:.2f} s; "
              f"HTA/polyprof per round min {r['ratio']['min']:.1f}x median {r['ratio']['median']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
