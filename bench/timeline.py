"""The HTML report's timeline at a million events: the report's writing time against the
session's start tree, the page's size, and in headless Chromium its first paint and the
time of a zoom step (both measured in the page with performance.now()).

The big trace is the V100 Kineto trace repeated (bench/scaling.py's ``replicate``) to
about ``--events`` events, saved once as .polyprof by the baseline tree. Each round
runs ``python -m polyprof report`` in fresh processes, baseline and this tree
alternating; then the page written by this tree is opened ``--repeat`` times, each time
with ten wheel zoom steps at different places and depths.

    python bench/timeline.py --baseline /work/before/src --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from child_env import child_env
from scaling import DEFAULT, replicate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _report(src: Path, trace: Path, out: Path) -> float:
    env = child_env(str(src))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "polyprof", "report", str(trace), "-o", str(out)], env=env,
                   check=True, capture_output=True)
    return time.perf_counter() - t


def _page(html: Path) -> dict[str, float | list[float]]:
    import cdp
    from analysis.browser import chromium

    page = cdp.Page(chromium())
    try:
        t = time.perf_counter()
        page.open(html, "document.documentElement.getAttribute('data-tl-ready')", timeout=120)
        wall = time.perf_counter() - t
        first = float(page.eval("document.documentElement.getAttribute('data-tl-first-paint-ms')"))
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        box = page.eval("(function(){var r=document.getElementById('tl-canvas').getBoundingClientRect();"
                        "return [r.left, r.top, r.width, r.height]})()")
        steps = []
        for k in range(10):  # zoom in at different places, then back out
            x = box[0] + 240 + (box[2] - 250) * (0.2 + 0.06 * k)
            page.mouse("mouseWheel", x, box[1] + 60, deltaX=0, deltaY=-200 if k < 7 else 600)
            steps.append(float(page.eval("document.documentElement.getAttribute('data-tl-zoom-ms')")))
        return {"first_paint_ms": first, "ready_wall_s": wall, "zoom_ms": steps}
    finally:
        page.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--baseline", default="/work/before/src", help="the baseline tree's src folder")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    base, here = Path(args.baseline), ROOT / "src"
    with tempfile.TemporaryDirectory(prefix="polyprof-timeline-") as tmp:
        d = Path(tmp)
        probe = subprocess.run([sys.executable, "-c", "import polyprof,sys; print(polyprof.load(sys.argv[1]).n_events)",
                                str(DEFAULT)], env=child_env(str(here)), capture_output=True,
                               text=True, check=True)
        times = max(1, round(args.events / int(probe.stdout)))
        big = replicate(DEFAULT, times, d)
        trace = d / "big.polyprof"
        subprocess.run([sys.executable, "-c", "import polyprof,sys; t=polyprof.load(sys.argv[1]); t.save(sys.argv[2]);"
                        "print(t.n_events)", str(big), str(trace)], env=child_env(str(base)),
                       check=True)
        before, now = [], []
        for _ in range(args.repeat):
            before.append(_report(base, trace, d / "before.html"))
            now.append(_report(here, trace, d / "now.html"))
        ratios = [b / a for a, b in zip(before, now)]
        print(f"report writing, s: baseline min {min(before):.2f} median {statistics.median(before):.2f}; "
              f"this tree min {min(now):.2f} median {statistics.median(now):.2f}; ratio min {min(ratios):.2f} "
              f"median {statistics.median(ratios):.2f}")
        print(f"page size: baseline {(d / 'before.html').stat().st_size / 1e6:.2f} MB, "
              f"this tree {(d / 'now.html').stat().st_size / 1e6:.2f} MB")
        pages = [_page(d / "now.html") for _ in range(args.repeat)]
        fp = [p["first_paint_ms"] for p in pages]
        zs = [z for p in pages for z in p["zoom_ms"]]  # type: ignore[union-attr]
        print(f"first paint (performance.now() at the timeline's first draw), ms: min {min(fp):.0f} "
              f"median {statistics.median(fp):.0f} max {max(fp):.0f}")
        print(f"zoom step (wheel handler with its redraw), ms: min {min(zs):.1f} median {statistics.median(zs):.1f} "
              f"max {max(zs):.1f} over {len(zs)} steps")
        print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
