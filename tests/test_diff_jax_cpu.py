"""polyprof diff on JAX CPU traces whose XLA ops nest: a ``while`` (``call``,
``conditional``) runs its computations' ops inside its own event on the XLA thread, and
the kernels table counts it for its own time only, not again for its body's."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.common import counted_kernels, device_view
from polyprof.analyze.diff import diff
from polyprof.analyze.frames import column
from polyprof.analyze.window import view
from polyprof.derive import cache
from polyprof.derive.intervals import union_len
from polyprof.trace.categories import Kind

SCAN = Path(__file__).parent / "data" / "traces" / "jax_cpu_scan"


def _window_ops(t: polyprof.Trace) -> np.ndarray:
    """The host XLA ops that start in the steps ``diff`` analyses (all but the first)."""
    steps = cache.steps(t)
    rows = t.rows_of_kind(Kind.KERNEL)
    st = t.events["start_ns"][rows]
    return rows[(st >= steps.start[1]) & (st < steps.end[-1])]


def _own_time_by_name(t: polyprof.Trace, rows: np.ndarray) -> collections.Counter:
    """Per raw name (``module/op``: XLA names ops uniquely within a module only), the
    events' durations less their direct children's: a stack walk per track, event by
    event (the test's own oracle, not polyprof's nesting)."""
    ev = t.events
    module = dict(zip(t.stats["hlo_module"].rows.tolist(), t.stats["hlo_module"].values.tolist()))
    own: collections.Counter = collections.Counter()
    for track in sorted(set(ev["track"][rows].tolist())):
        r = rows[ev["track"][rows] == track]
        r = r[np.lexsort((-ev["dur_ns"][r].astype(np.int64), ev["start_ns"][r]))]
        stack: list[tuple[str, int]] = []  # (name, end) of the open ops
        for i in r.tolist():
            s, d, name = int(ev["start_ns"][i]), int(ev["dur_ns"][i]), f"{module[i]}/{t.strings[ev['name'][i]]}"
            while stack and stack[-1][1] <= s:
                stack.pop()
            own[name] += d
            if stack:
                own[stack[-1][0]] -= d
            stack.append((name, s + d))
    return own


def test_enclosing_xla_ops_count_their_own_time_only():
    """Before, each trip's ops were counted once as themselves and again inside the
    ``while`` (twice inside the nested one): run A's kernels summed 2.448 ms in 5 steps
    that took 1.82 ms on the program's own clock; now 1.032 ms, the time the XLA thread
    spent in ops (the union of their events), and every row its ops' own time."""
    a, b = (polyprof.load(SCAN / f"run_{s}.xplane.pb.gz") for s in "ab")
    d = diff(a, b)
    k = d.tables["kernels"]
    names, raw = list(column(k, "name")), list(column(k, "raw_names"))
    for side, t in (("a", a), ("b", b)):
        rows = _window_ops(t)
        st = t.events["start_ns"][rows].astype(np.int64)
        busy = union_len(st, st + t.events["dur_ns"][rows])
        total = column(k, f"total_ns_{side}")
        assert int(np.sum(total)) == busy < int(t.events["dur_ns"][rows].sum())
        own = _own_time_by_name(t, rows)
        for i, n in enumerate(names):
            assert total[i] == sum(own[r] for r in raw[i]), n
    total_a = dict(zip(names, column(k, "total_ns_a")))
    assert int(np.sum(column(k, "total_ns_a"))) == 1_032_488
    # 5 while.17 and 25 while.1: their own time (before: 1.438 ms; one row "while" of 59_221 ns before
    # the ops of a module kept their HLO names)
    assert total_a["jit_step/while.17"] == 24_574 and total_a["jit_step/while.1"] == 34_647
    assert sum(column(k, "count_a")) == sum(column(k, "count_b")) == 390  # every op still counted once


def test_scan_of_the_mlp_fixture():
    """jax_cpu_mlp_scan's 4-trip scan: the two analysed ``while.5`` last 12929 and
    7051 ns around 10314 and 5539 ns of body ops; the row keeps 2615 + 1512 ns (before:
    19980), the body's rows keep their durations. The ops are rows of their module:
    ``ynn_fusion`` was one row of 57295 ns, the sum of ``jit_loss``'s three matmuls
    (``ynn_fusion``, ``.1``, ``.2``) and ``jit_rnn``'s one."""
    p = Path(__file__).parent / "data" / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb"
    t = polyprof.load(p)
    k = diff(t, t).tables["kernels"]
    total = dict(zip(column(k, "name"), column(k, "total_ns_a")))
    assert total["jit_rnn/while.5"] == 4127
    assert total["jit_rnn/ynn_fusion"] == 9053 and total["jit_rnn/wrapped_tanh"] == 4045
    assert [total[f"jit_loss/ynn_fusion{n}"] for n in ("", ".1", ".2")] == [30466, 5408, 12368]
    assert sum(total.values()) == 136065


@pytest.mark.parametrize("path", ["xspace/tpu_inference_2.xplane.pb", "kineto/a100_alexnet_small.json.gz"])
def test_device_kernels_keep_their_duration(traces_dir, path):
    """Device activity is not self-timed: a TPU's ``copy-start`` spans the ops that run
    while its copy does (no body of its own), and GPU kernels do not nest on a stream."""
    t = view(polyprof.load(traces_dir / path), None)
    v = device_view(t)
    _, dur, _, _ = counted_kernels(t)
    want = (v.end - v.start)[v.counted]
    assert len(want) > 90
    np.testing.assert_array_equal(dur[:len(want)], want)


def test_diff_of_two_log_directories(tmp_path):
    """`polyprof diff A B` of the directories `jax.profiler.trace` wrote (``A/plugins/
    profile/<run>/<host>.xplane.pb``): one run a side, as `polyprof summary A` reads it;
    the lone ``plugins`` folder was taken for a run of a directory of runs ("A/plugins: no
    trace files in this directory")."""
    import gzip
    import json
    import subprocess
    import sys

    for side in ("a", "b"):
        run = tmp_path / side / "plugins" / "profile" / "2026_11_30_04_00_00"
        run.mkdir(parents=True)
        (run / "host.xplane.pb").write_bytes(gzip.decompress((SCAN / f"run_{side}.xplane.pb.gz").read_bytes()))
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["overview"]["a"]["runs"] == doc["overview"]["b"]["runs"] == 1
    assert doc["overview"]["rows_tested"] > 5


def test_a_log_directory_whose_latest_run_is_empty_reads_the_one_before(tmp_path, caplog):
    """A capture that wrote nothing (its profile folder empty, the newest): the log
    directory reads the latest run that holds trace files, and says it passed one over
    (before: "...: no trace files in this directory")."""
    import gzip
    import os

    from polyprof.ranks.sources import resolve

    profile = tmp_path / "logs" / "plugins" / "profile"
    older, newer = profile / "2026_11_30_04_00_00", profile / "2026_11_30_05_00_00"
    older.mkdir(parents=True)
    newer.mkdir()
    (older / "host.xplane.pb").write_bytes(gzip.decompress((SCAN / "run_a.xplane.pb.gz").read_bytes()))
    os.utime(older, (1_000_000, 1_000_000))
    with caplog.at_level("WARNING", logger="polyprof"):
        sources = resolve(str(tmp_path / "logs"))
    assert len(sources) == 1 and sources[0].load().n_events > 0
    assert "holds no trace files; reading 2026_11_30_04_00_00" in caplog.text
