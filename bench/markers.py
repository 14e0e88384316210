"""Cost of one section enter+exit, against the markers people use today.

Measures, in one process (so machine noise hits all alike), the per-call cost of:
an empty no-op context manager, one clock read, polyprof.section with no session and with a session
active, nvtx.annotate (created each time, the common use; no NVTX tool attached here),
and torch.profiler.record_function with and without a torch profiler running. Also, for
reference: the pure-Python fallback section (recorder.PySection) and one section object
reused by every iteration (`ATTN = section("attn")`, `with ATTN:`), both with and without
a session. polyprof.section is the compiled one when it was built (see "implementation").
"Active" is measured in two sessions: host-only (``plugins=["host"]``, in this process)
and the default session (``polyprof.profile()``: every available default plugin), in a
child interpreter that never imports torch (this one does, for record_function), against
nvtx.annotate measured in that child, interleaved. With torch imported and its
profiler recording, the torch plugin mirrors each section into torch (by design: they
show in torch's own trace), which costs what record_function costs; that is not the
default-session figure. Also the cost per section at stop: the session's stop + collect
after n sections, less that of the same session with none, divided by n (median).
Reports ns per enter+exit (best of several repeats) and the ratios the targets use:
  active  <= nvtx.annotate            (ratio active / nvtx <= 1, in both sessions)
  no session <= 1.5 x no-op manager   (ratio idle / noop <= 1.5)

    python bench/markers.py [--n 200000] [--repeat 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Callable

import polyprof
from polyprof.collect.recorder import IMPLEMENTATION, PySection


class NoOp:
    __slots__ = ()

    def __enter__(self) -> "NoOp":
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


def best_ns(body: Callable[[int], None], n: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        body(n)
        times.append((time.perf_counter_ns() - t0) / n)
    return min(times)


def loop_noop(n: int) -> None:
    for _ in range(n):
        with NoOp():
            pass


def loop_section(n: int) -> None:
    section = polyprof.section
    for _ in range(n):
        with section("step"):
            pass


def loop_py_section(n: int) -> None:
    section = PySection
    for _ in range(n):
        with section("step"):
            pass


def loop_reused(n: int) -> None:
    attn = polyprof.section("attn")
    for _ in range(n):
        with attn:
            pass


def loop_clock(n: int) -> None:
    now = time.perf_counter_ns
    for _ in range(n):
        now()


def stop_per_section_ns(open_session: Callable[[], polyprof.Session], n: int) -> float:
    """(stop + collect after n sections - stop + collect of an empty session) / n."""
    s = open_session()
    s.start()
    loop_section(n)
    t0 = time.perf_counter_ns()
    s.stop()
    full = time.perf_counter_ns() - t0
    e = open_session()
    e.start()
    t0 = time.perf_counter_ns()
    e.stop()
    return (full - (time.perf_counter_ns() - t0)) / n


def default_session_child(n: int, rep: int) -> dict[str, object]:
    """In a fresh interpreter without torch: the default session against nvtx.annotate."""
    import nvtx

    def loop_nvtx(k: int) -> None:
        annotate = nvtx.annotate
        for _ in range(k):
            with annotate("step"):
                pass

    quiet = {"host": {"sample_interval_s": 0}}
    res = {"nvtx_annotate": float("inf"), "polyprof_active_default_session": float("inf")}
    stops = []
    plugins: list[str] = []
    for _ in range(rep):
        res["nvtx_annotate"] = min(res["nvtx_annotate"], best_ns(loop_nvtx, n, 1))
        with polyprof.profile(options=quiet) as s:
            t = best_ns(loop_section, n, 1)
        res["polyprof_active_default_session"] = min(res["polyprof_active_default_session"], t)
        plugins = sorted(k for k, v in s.trace.metadata["plugins"].items() if v == "ok")
        stops.append(stop_per_section_ns(lambda: polyprof.profile(options=quiet), n))
    res["stop_per_section_default_session"] = sorted(stops)[len(stops) // 2]
    return {"ns_per_call": res, "plugins": plugins, "torch_imported": "torch" in sys.modules}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--child-default-session", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    n, rep = args.n, args.repeat
    if args.child_default_session:
        print(json.dumps(default_session_child(n, rep)))
        return
    child = subprocess.run([sys.executable, __file__, "--child-default-session", "--n", str(n), "--repeat", str(rep)],
                           capture_output=True, text=True, env=os.environ.copy())
    if child.returncode != 0:
        raise SystemExit(f"default-session child failed: {child.stderr}")
    default = json.loads(child.stdout.strip().splitlines()[-1])
    loops: dict[str, tuple[Callable[[int], None], int]] = {
        "noop_cm": (loop_noop, n), "polyprof_no_session": (loop_section, n)}
    # measured with no session and again inside one (names get an "_active" suffix)
    polyprof_loops = {"polyprof": loop_section, "polyprof_reused": loop_reused, "python_fallback": loop_py_section}
    try:
        import nvtx

        def loop_nvtx(k: int) -> None:
            annotate = nvtx.annotate
            for _ in range(k):
                with annotate("step"):
                    pass

        loops["nvtx_annotate"] = (loop_nvtx, n)
    except ImportError:
        pass
    try:
        from torch.profiler import ProfilerActivity, profile, record_function

        def loop_rf(k: int) -> None:
            for _ in range(k):
                with record_function("step"):
                    pass

        loops["torch_record_function_no_profiler"] = (loop_rf, n // 10)
    except ImportError:
        profile = None
    # Interleave the markers, repeat after repeat, so load on a shared machine hits all alike.
    res: dict[str, float] = {}
    stops: list[float] = []
    for _ in range(rep):
        for name, (body, k) in loops.items():
            res[name] = min(res.get(name, float("inf")), best_ns(body, k, 1))
        for name, body in polyprof_loops.items():
            if name != "polyprof":
                key = f"{name}_no_session"
                res[key] = min(res.get(key, float("inf")), best_ns(body, n, 1))
            with polyprof.profile(plugins=["host"], options={"host": {"sample_interval_s": 0}}):
                res[f"{name}_active"] = min(res.get(f"{name}_active", float("inf")), best_ns(body, n, 1))
        stops.append(stop_per_section_ns(
            lambda: polyprof.profile(plugins=["host"], options={"host": {"sample_interval_s": 0}}), n))
    res["stop_per_section_host"] = sorted(stops)[len(stops) // 2]
    d = default["ns_per_call"]
    res["polyprof_active_default_session"] = d["polyprof_active_default_session"]
    res["nvtx_annotate_default_session_child"] = d["nvtx_annotate"]
    res["stop_per_section_default_session"] = d["stop_per_section_default_session"]
    if profile is not None:
        with profile(activities=[ProfilerActivity.CPU]):
            res["torch_record_function_profiling"] = best_ns(loops["torch_record_function_no_profiler"][0],
                                                             n // 20, 3)
    res["clock_read"] = best_ns(loop_clock, n, rep)
    ratios = {"idle_vs_noop": res["polyprof_no_session"] / res["noop_cm"]}
    if "nvtx_annotate" in res:
        ratios["active_vs_nvtx"] = res["polyprof_active"] / res["nvtx_annotate"]
        ratios["python_fallback_active_vs_nvtx"] = res["python_fallback_active"] / res["nvtx_annotate"]
    ratios["active_default_session_vs_nvtx"] = d["polyprof_active_default_session"] / d["nvtx_annotate"]
    ratios["stop_per_section_vs_active_host"] = res["stop_per_section_host"] / res["polyprof_active"]
    ratios["python_fallback_no_session_vs_noop"] = res["python_fallback_no_session"] / res["noop_cm"]
    if "torch_record_function_profiling" in res:
        ratios["active_vs_torch_profiling"] = res["polyprof_active"] / res["torch_record_function_profiling"]
    if args.json:
        print(json.dumps({"implementation": IMPLEMENTATION, "default_session": {
            "plugins": default["plugins"], "torch_imported": default["torch_imported"]},
            "ns_per_call": res, "ratios": ratios}, indent=2))
        return
    print(f"polyprof.section implementation: {IMPLEMENTATION}; default session (child, torch not imported): "
          f"{', '.join(default['plugins'])}\n")
    print(f"{'marker':40s} {'ns / enter+exit':>16s}")
    for k, v in res.items():
        print(f"{k:40s} {v:16.1f}")
    print()
    for k, v in ratios.items():
        print(f"{k:40s} {v:16.2f}")
    ok_idle = ratios["idle_vs_noop"] <= 1.5
    ok_active = ratios.get("active_vs_nvtx", 0) <= 1.0
    ok_default = ratios["active_default_session_vs_nvtx"] <= 1.0
    print(f"\ntarget no session <= 1.5x no-op: {'met' if ok_idle else 'MISSED'}; "
          f"active <= nvtx.annotate: host-only {'met' if ok_active else 'MISSED'}, "
          f"default session {'met' if ok_default else 'MISSED'}")


if __name__ == "__main__":
    main()
