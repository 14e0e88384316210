"""A million kernel launches under ``polyprof run`` (the cupti plugin), on a real NVIDIA GPU.

    python scripts/gpu_cupti_scale.py 1000000 cuda host,cupti
    python scripts/gpu_cupti_scale.py 100000 cuda host,cupti '{"cupti": {"implementation": "python"}}'
    python scripts/gpu_cupti_scale.py 20000 cpu host            # a dry run without a GPU

One program (a loop of ``x.add_(1.0)`` on a 16-float tensor, one kernel each) runs as its
own process plain and under ``polyprof run``: wall and CPU time and peak RSS of each (from
``wait4``), the trace's size, what polyprof wrote on stderr, ``polyprof summary`` of the
trace (time, peak RSS), and the kernels and CUPTI counts in the trace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

PROGRAM = '''
import sys, torch
n, dev = int(sys.argv[1]), sys.argv[2]
x = torch.zeros(16, device=dev)
for _ in range(n):
    x.add_(1.0)
if dev == "cuda":
    torch.cuda.synchronize()
print("sum", float(x.sum()))
'''


def timed(args: list[str], stderr_to: str, quiet: bool = False) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, exit code) of one child process."""
    t0 = time.perf_counter()
    with open(stderr_to, "a") as err:
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL if quiet else None, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> int:
    n, dev, plugins = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    options = ["--plugin-options", sys.argv[4]] if len(sys.argv) > 4 else []
    tmp = tempfile.mkdtemp()
    script, out, err = (os.path.join(tmp, f) for f in ("many.py", "many.polyprof", "stderr.txt"))
    with open(script, "w") as f:
        f.write(PROGRAM)
    for label, args in (("plain", [sys.executable, script, str(n), dev]),
                        ("polyprof run", [sys.executable, "-m", "polyprof", "run", "--plugins", plugins, "--no-summary",
                                          *options, "-o", out, script, str(n), dev])):
        w, c, m, rc = timed(args, err)
        print(f"{label}: {n} launches, wall {w:.2f} s, cpu {c:.2f} s, peak RSS {m:.0f} MB, rc {rc}", flush=True)
    print(f"trace {os.path.getsize(out) / 1e6:.1f} MB")
    lines = open(err).read().splitlines()
    print(f"stderr: {len(lines)} lines; last: {lines[-3:]}")
    w, c, m, rc = timed([sys.executable, "-m", "polyprof", "summary", out], err, quiet=True)
    print(f"polyprof summary of it: wall {w:.2f} s, cpu {c:.2f} s, peak RSS {m:.0f} MB, rc {rc}")

    import polyprof
    from polyprof.trace.categories import Kind

    t = polyprof.load(out)
    md = t.metadata.get("cupti", {})
    print("kernels in trace:", len(t.rows_of_kind(Kind.KERNEL)),
          "cupti:", {k: md[k] for k in ("records", "buffers", "problems", "calls_not_kept") if k in md})
    return 0


if __name__ == "__main__":
    sys.exit(main())
