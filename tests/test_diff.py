"""polyprof diff: tables checked against the raw JSON (read with the stdlib), known changes
injected into real traces, name normalisation, the rank test, and real PyTorch CPU runs."""

from __future__ import annotations

import bisect
import collections
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.names import normalize_name
from polyprof.analyze.ranktest import mann_whitney, min_p_value
from polyprof.errors import PolyprofError

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # Kineto's device activity categories


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True,
                          timeout=timeout)


def diff_json(a: Path, b: Path, *extra: str) -> dict:
    r = cli("diff", str(a), str(b), "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def records(doc: dict, table: str) -> dict[str, dict]:
    return {r["name"]: r for r in doc["tables"][table]["records"]}


# ----------------------------------------------------------------- raw JSON, stdlib only
def read_raw(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def write_raw(doc: dict, path: Path) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def device_sums(*docs: dict) -> tuple[collections.Counter, collections.Counter]:
    """Count and total duration (ns, as Kineto's µs rounded to ns) per device activity name."""
    count, total = collections.Counter(), collections.Counter()
    for doc in docs:
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
                count[e["name"]] += 1
                total[e["name"]] += round(e["dur"] * 1000)
    return count, total


def kernel_steps(doc: dict) -> dict[int, int]:
    """Index in traceEvents of each device activity -> the ProfilerStep#N its launch call started in."""
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in doc["traceEvents"]
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                   and e["name"].startswith("ProfilerStep#"))
    starts = [s[0] for s in steps]
    launch = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    out = {}
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
            ts = launch.get(e.get("args", {}).get("correlation"), e["ts"])
            j = bisect.bisect_right(starts, ts) - 1
            if j >= 0 and ts < steps[j][1]:
                out[i] = steps[j][2]
    return out


def check_against_raw(table: dict[str, dict], a_docs: list[dict], b_docs: list[dict], normalized: bool) -> None:
    """Every row's counts and totals equal the raw JSON's, summed over the raw names it merges."""
    ca, ta = device_sums(*a_docs)
    cb, tb = device_sums(*b_docs)
    seen: list[str] = []
    for name, r in table.items():
        raw = r["raw_names"] if normalized else [name]
        seen += raw
        assert r["count_a"] == sum(ca[n] for n in raw) and r["count_b"] == sum(cb[n] for n in raw), name
        assert r["total_ns_a"] == sum(ta[n] for n in raw) and r["total_ns_b"] == sum(tb[n] for n in raw), name
        assert r["delta_total_ns"] == r["total_ns_b"] - r["total_ns_a"]
        assert r["delta_count"] == r["count_b"] - r["count_a"]
    assert sorted(seen) == sorted(set(ca) | set(cb))  # each raw name in exactly one row


# ----------------------------------------------------------------- two real traces
def test_two_real_traces_kernel_table_matches_raw_json(kineto_files):
    a, b = (next(f for f in kineto_files if f.name.startswith(p)) for p in ("v100_ns", "a100_nccl"))
    da, db = read_raw(a), read_raw(b)
    for extra, normalized in ((("--raw-names",), False), ((), True)):
        doc = diff_json(a, b, *extra)
        t = doc["tables"]["kernels"]
        for col in ("name", "count_a", "count_b", "total_ns_a", "total_ns_b", "delta_total_ns", "rel_change",
                    "p_value", "significant"):
            assert col in t["columns"]
        check_against_raw(records(doc, "kernels"), [da], [db], normalized)
        assert set(doc["tables"]) == {"kernels", "ops", "sections"}
        assert doc["overview"]["a"]["steps"] == 5 and doc["overview"]["b"]["steps"] == 3
    # normalisation merged template instantiations that the raw names keep apart
    assert len(records(doc, "kernels")) < len(set(device_sums(da)[0]) | set(device_sums(db)[0]))
    assert any(r["variants"] > 1 for r in doc["tables"]["kernels"]["records"])
    # the NCCL kernel runs only in B: new there, and 3 vs 5 steps can be tested (min p 0.036)
    nccl = next(r for r in doc["tables"]["kernels"]["records"] if r["name"].startswith("ncclKernel_AllReduce"))
    assert nccl["count_a"] == 0 and nccl["count_b"] > 0 and nccl["rel_change"] is None
    assert nccl["significant"] is True and nccl["change"] == "slower"


# ----------------------------------------------------------------- known truth
@pytest.fixture(scope="module")
def injected(kineto_files, tmp_path_factory):
    """The V100 trace and a copy with: K1 30% slower everywhere, every other K2 removed,
    K3 20% slower in one step only (a hiccup, not a change)."""
    src = next(f for f in kineto_files if f.name.startswith("v100_ns"))
    doc = read_raw(src)
    step_of = kernel_steps(doc)
    count, total = device_sums(doc)
    # the three kernels (compute, present in all 5 steps) with the most time
    in_steps = collections.defaultdict(set)
    for i, s in step_of.items():
        in_steps[doc["traceEvents"][i]["name"]].add(s)
    names = [n for n, _ in total.most_common() if len(in_steps[n]) == 5 and not n.startswith("Mem")]
    k1, k2, k3 = names[:3]
    hiccup_step = sorted(in_steps[k3])[2]
    seen_k2 = 0
    out = []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
            if e["name"] == k1:
                e = {**e, "dur": round(e["dur"] * 1.3, 3)}  # Kineto writes ns: 3 decimals
            elif e["name"] == k2:
                seen_k2 += 1
                if seen_k2 % 2 == 0:
                    continue
            elif e["name"] == k3 and step_of.get(i) == hiccup_step:
                e = {**e, "dur": round(e["dur"] * 1.2, 3)}
        out.append(e)
    mod = {**doc, "traceEvents": out}
    b = write_raw(mod, tmp_path_factory.mktemp("inj") / "v100_changed.json.gz")
    return {"a": src, "b": b, "raw_a": doc, "raw_b": mod, "k1": k1, "k2": k2, "k3": k3, "dropped": seen_k2 // 2}


def test_injected_changes_called_and_nothing_else(injected):
    doc = diff_json(injected["a"], injected["b"], "--raw-names")
    k = records(doc, "kernels")
    check_against_raw(k, [injected["raw_a"]], [injected["raw_b"]], normalized=False)
    k1, k2, k3 = (k[injected[x]] for x in ("k1", "k2", "k3"))
    assert k1["significant"] is True and k1["change"] == "slower" and abs(k1["rel_change"] - 0.3) < 1e-3
    assert k1["p_value"] < 0.01  # 5 vs 5 steps, completely separated: 2/252
    assert k2["significant"] is True and k2["change"] == "faster" and k2["delta_count"] == -injected["dropped"]
    assert k3["delta_total_ns"] > 0 and k3["significant"] is False and k3["change"] == ""
    others = [r for n, r in k.items() if n not in (injected["k1"], injected["k2"], injected["k3"])]
    assert others and all(r["delta_total_ns"] == 0 and r["significant"] is False for r in others)
    for table in ("ops", "sections"):  # host time was not touched
        rows = doc["tables"][table]["records"]
        assert rows and all(r["delta_total_ns"] == 0 and r["significant"] is False for r in rows)
    assert doc["step_time"]["significant"] is False
    # the verdict names the two changes, in their direction, and not the hiccup
    text = "\n".join(doc["verdict"]["text"])
    slower = next(l for l in text.splitlines() if l.startswith("Slower"))
    faster = next(l for l in text.splitlines() if l.startswith("Faster"))
    assert slower.startswith("Slower in B (1): kernel " + injected["k1"][:59])
    assert faster.startswith("Faster in B (1): kernel " + injected["k2"][:59])
    assert "174 of 176" in text  # everything else, the hiccup included, is within the noise
    assert {c["name"]: c["change"] for c in doc["verdict"]["changes"]} == {injected["k1"]: "slower",
                                                                           injected["k2"]: "faster"}


def test_terminal_table_and_verdict(injected):
    import os

    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(injected["a"]), str(injected["b"]), "-n", "3"],
                       capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "160"})
    assert r.returncode == 0, r.stderr
    assert "Verdict" in r.stdout and "Slower in B" in r.stdout and "Faster in B" in r.stdout
    assert "Device activity" in r.stdout and "(top 3 of" in r.stdout
    line = next(l for l in r.stdout.splitlines() if l.count("│") > 5 and "+30.0%" in l)  # a table row
    assert "slower" in line


# ----------------------------------------------------------------- ranks
def test_ranks_as_directories(kineto_files, tmp_path):
    """Run A: sampled_rank0 + sampled_rank1 (two real ranks); run B: the same with one kernel
    three times as long on both ranks. 2 ranks x 2 steps = 4 samples a side."""
    ranks = [next(f for f in kineto_files if f.name == f"sampled_rank{i}.json.gz") for i in (0, 1)]
    raws = [read_raw(f) for f in ranks]
    c0, _ = device_sums(raws[0])
    c1, t1 = device_sums(raws[1])
    target = next(n for n, _ in t1.most_common() if c0[n] and c1[n] and not n.startswith("nccl"))
    da, db = tmp_path / "A", tmp_path / "B"
    da.mkdir()
    db.mkdir()
    mods = []
    for i, (f, raw) in enumerate(zip(ranks, raws)):
        shutil.copy(f, da / f"rank{i}.json.gz")
        mod = {**raw, "traceEvents": [{**e, "dur": e["dur"] * 3} if e.get("name") == target and e.get("ph") == "X"
                                      else e for e in raw["traceEvents"]]}
        mods.append(mod)
        write_raw(mod, db / f"rank{i}.json.gz")
    (da / "notes.txt").write_text("not a trace")  # ignored: not a trace file name
    doc = diff_json(da, db)
    assert doc["overview"]["a"]["traces"] == 2 and doc["overview"]["a"]["ranks"] == [0, 1]
    assert doc["overview"]["a"]["steps"] == 4 and doc["overview"]["untestable"] is None
    k = records(doc, "kernels")
    check_against_raw(k, raws, mods, normalized=True)
    row = next(r for r in k.values() if target in r["raw_names"])
    assert row["significant"] is True and row["change"] == "slower"
    assert row["p_value"] == pytest.approx(2 / 70)
    # one rank alone has 2 vs 2 steps: the test cannot be made, and says so
    one = diff_json(da / "rank0.json.gz", db / "rank0.json.gz")
    assert one["overview"]["untestable"].startswith("too few steps (2 vs 2)")
    assert all(r["significant"] is None for r in one["tables"]["kernels"]["records"])
    assert "No change is called significant" in "\n".join(one["verdict"]["text"])


def test_api_takes_traces_and_sequences(kineto_files):
    ranks = [polyprof.load(next(f for f in kineto_files if f.name == f"sampled_rank{i}.json.gz")) for i in (0, 1)]
    both = diff(ranks, (t for t in ranks))  # a generator is consumed one trace at a time
    one = diff(ranks[0], ranks[0])
    k, k0 = both.tables["kernels"], one.tables["kernels"]
    assert (k["delta_total_ns"] == 0).all() and (k["significant"] == False).all()  # noqa: E712
    # two ranks' counts add up
    c = k.set_index("name")["count_a"]
    c0 = k0.set_index("name")["count_a"]
    c1 = diff(ranks[1], ranks[1]).tables["kernels"].set_index("name")["count_a"]
    assert (c == c0.reindex(c.index, fill_value=0) + c1.reindex(c.index, fill_value=0)).all()


def test_merged_ranks_are_flagged(kineto_files):
    """A merged trace of two ranks is one trace with two sources: its steps merge by number,
    so the diff says to pass the ranks apart; counts still add up."""
    from polyprof.trace.merge import merge

    ranks = [polyprof.load(next(f for f in kineto_files if f.name == f"sampled_rank{i}.json.gz")) for i in (0, 1)]
    merged = merge(ranks)
    assert len(merged.sources) == 2
    d = diff(merged, ranks)
    assert d.overview["a"]["warnings"] and "2 sources" in d.overview["a"]["warnings"][0]
    assert "b" not in d.overview or not d.overview["b"].get("warnings")
    assert d.overview["b"]["ranks"] == [0, 1] and any(l.startswith("Note: run A trace 0 holds 2 sources")
                                                       for l in d.verdict)
    k = d.tables["kernels"]
    assert (k["count_a"] == k["count_b"]).all() and (k["delta_total_ns"] == 0).all()


def test_traceset_ranks_reduce_in_workers(kineto_files, tmp_path):
    """A TraceSet (polyprof.load_ranks) is reduced rank by rank on its executor: the
    process pool and the serial executor give the same tables as the loaded traces."""
    files = [next(f for f in kineto_files if f.name == f"sampled_rank{i}.json.gz") for i in (0, 1)]
    ref = diff([polyprof.load(f) for f in files], polyprof.load(files[0]))
    for executor in (None, "serial"):
        d = diff(polyprof.load_ranks(files), polyprof.load(files[0]), executor=executor)
        assert d.overview["a"]["ranks"] == [0, 1] and d.overview["a"]["steps"] == 4
        for t in ("kernels", "ops", "sections"):
            got, want = d.tables[t], ref.tables[t]
            assert got["name"].tolist() == want["name"].tolist()
            for c in ("count_a", "count_b", "total_ns_a", "total_ns_b", "delta_total_ns"):
                assert got[c].tolist() == want[c].tolist(), (t, c)
            np.testing.assert_allclose(got["p_value"].to_numpy(float), want["p_value"].to_numpy(float))


def test_no_steps_cannot_be_tested(kineto_files):
    f = next(f for f in kineto_files if f.name.startswith("a100_alexnet"))
    doc = diff_json(f, f)
    assert doc["overview"]["untestable"].startswith("run A and B have no steps")
    assert all(r["significant"] is None and r["p_value"] is None for r in doc["tables"]["kernels"]["records"])
    assert doc["step_time"]["steps_a"] == 0
    t = polyprof.load(f)
    d = diff(t, t)
    assert d.tables["kernels"]["significant"].isna().all() and "no steps" in d.text


def test_xspace_tpu_trace_diffs_with_itself(traces_dir):
    t = polyprof.load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb")
    d = diff(t, t)
    k = d.tables["kernels"].set_index("name")
    # XLA's instance numbers are stripped: copy-done, copy-done.1 ... copy-done.5 are one row
    assert k.loc["copy-done", "variants"] == 6 and k.loc["copy-done", "count_a"] == 2400
    assert (k["delta_total_ns"] == 0).all()


def _torch_run(torch, path: Path, size: int, steps: int = 8) -> Path:
    """A real torch.profiler CPU trace: ``steps`` recorded steps of a matmul of ``size``."""
    torch.manual_seed(0)
    x = torch.randn(size, size)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(steps + 1):
            with torch.profiler.record_function("work"):
                for _ in range(3):
                    torch.mm(x, x)
            prof.step()
    return path


def test_real_torch_cpu_runs(tmp_path):
    """Two real PyTorch CPU runs, B with matrices three times as wide (27x the flops): the
    matmul and the section around it are called slower, with 8 vs 8 steps. The margin is
    wide because this machine is shared: a step of A preempted for a few ms must not
    reach B's steps."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    a = _torch_run(torch, tmp_path / "a.json", 128)
    b = _torch_run(torch, tmp_path / "b.json", 384)
    d = diff(polyprof.load(a), polyprof.load(b))
    assert d.overview["untestable"] is None and d.step_time["steps_a"] == d.step_time["steps_b"] == 8
    ops = d.tables["ops"].set_index("name")
    assert ops.loc["aten::mm", "count_a"] == ops.loc["aten::mm", "count_b"] == 24
    assert ops.loc["aten::mm", "change"] == "slower" and ops.loc["aten::mm", "p_value"] < 0.05
    sec = d.tables["sections"].set_index("name")
    assert sec.loc["work", "change"] == "slower" and sec.loc["work", "count_a"] == 8
    assert d.step_time["change"] == "slower"
    assert "aten::mm" in next(l for l in d.verdict if l.startswith("Slower in B"))


# ----------------------------------------------------------------- errors
def test_errors_are_one_line(tmp_path, kineto_files):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("diff", str(empty), str(kineto_files[0]))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no trace files" in r.stderr and str(empty) in r.stderr
    r = cli("diff", str(tmp_path / "nope.json"), str(kineto_files[0]))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "nope.json" in r.stderr and "no such file" in r.stderr
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [')
    r = cli("diff", str(kineto_files[0]), str(tmp_path))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "rank1.json" in r.stderr and "Traceback" not in r.stderr


def test_api_bad_input():
    t = polyprof.Trace()
    with pytest.raises(PolyprofError, match="run B item 1 is a str"):
        diff(t, [t, "x.json"])
    with pytest.raises(PolyprofError, match="run A has no traces"):
        diff([], t)
    with pytest.raises(PolyprofError, match="not a str"):
        diff("a.json", t)
    with pytest.raises(PolyprofError, match="alpha"):
        diff(t, t, alpha=2)
    d = diff(t, t)  # empty traces: empty tables, no crash
    assert all(len(df) == 0 for df in d.tables.values()) and "no steps" in d.text


# ----------------------------------------------------------------- names
NAMES = [
    # (raw, normalised) written by hand
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float)",
     "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, N, true, N>(float, float)"),
    ("void cudnn::ops::nchwToNhwcKernel<float, false, (cudnnKernelDataType_t)2>(float const*)",
     "void cudnn::ops::nchwToNhwcKernel<float, false, N>(float const*)"),
    ("void k<c10::Half, long, 2ul, 32ul>(int)", "void k<c10::Half, long, N, N>(int)"),
    ("at::detail::Array<char*, 3> ", "at::detail::Array<char*, N> "),
    ("f<-1, 2.5f>", "f<N, N>"),
    ("<built-in method at 0x7f3a2c00beef>", "<built-in method at 0x?>"),
    ("fused_kernel_3f9a2b7c1d4e", "fused_kernel_<hex>"),
    ("jit_f(12190760917235803885)", "jit_f"),
    ("copy-done.12", "copy-done"),
    ("fusion.3.1", "fusion"),
    ("ProfilerStep#12", "ProfilerStep#N"),
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin"),
    # left alone: numbers that are part of the name
    ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn"),
    ("AddmmBackward0", "AddmmBackward0"),
    ("model/dense_1/MatMul", "model/dense_1/MatMul"),
    ("Optimizer.step#SGD.step", "Optimizer.step#SGD.step"),
    ("deadbeefcafe", "deadbeefcafe"),  # hex letters but no digit: a word
    ("12345678", "12345678"),
    ("v1.2", "v1.2"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
]


@pytest.mark.parametrize("raw, expected", NAMES)
def test_normalize_name(raw, expected):
    assert normalize_name(raw) == expected


def test_normalized_names_match_across_runs(kineto_files, tmp_path):
    """Run B is the MI250 trace with every numeric template argument of its kernel names
    changed (another build instantiates other tile sizes): normalised, each kernel still
    matches itself; with raw names nothing does."""
    import re

    f = next(f for f in kineto_files if f.name.startswith("mi250"))
    raw = read_raw(f)
    bump = lambda n: re.sub(r"(?<=[<,] )(\d+)(?=[,>])|(?<=<)(\d+)(?=[,>])",  # noqa: E731
                            lambda m: str(int(m.group(0)) + 1), n)
    changed = {e["name"] for e in raw["traceEvents"] if e.get("cat") in DEVICE_CATS and bump(e["name"]) != e["name"]}
    assert changed  # the trace has kernels with numeric template arguments
    mod = {**raw, "traceEvents": [{**e, "name": bump(e["name"])} if e.get("cat") in DEVICE_CATS else e
                                  for e in raw["traceEvents"]]}
    b = write_raw(mod, tmp_path / "mi250_other_build.json.gz")
    k = records(diff_json(f, b), "kernels")
    assert all(r["delta_total_ns"] == 0 and r["delta_count"] == 0 for r in k.values())
    assert sum(r["variants"] == 2 for r in k.values()) == len(changed)
    k = records(diff_json(f, b, "--raw-names"), "kernels")
    assert sum(r["count_b"] == 0 for r in k.values()) == len(changed)
    assert sum(r["count_a"] == 0 for r in k.values()) == len(changed)


# ----------------------------------------------------------------- the test itself
def test_mann_whitney_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for n_a, n_b in ((5, 5), (4, 6), (3, 8), (12, 15), (40, 30)):
        a = rng.normal(size=(40, n_a))
        b = rng.normal(0.7, size=(40, n_b))
        p, method = mann_whitney(a, b)
        ref = [stats.mannwhitneyu(a[i], b[i], method="exact" if method == "exact" else "asymptotic").pvalue
               for i in range(len(a))]
        np.testing.assert_allclose(p, ref, rtol=1e-9, atol=1e-12)
        # with ties (values from a few levels) the exact test is a permutation test of U
        a = rng.integers(0, 3, size=(10, n_a)).astype(float)
        b = rng.integers(0, 4, size=(10, n_b)).astype(float)
        p, method = mann_whitney(a, b)
        for i in range(len(a)):
            if method == "exact":
                u = lambda x, y, axis: stats.mannwhitneyu(x, y, axis=axis, method="asymptotic").statistic  # noqa: E731
                ref = stats.permutation_test((a[i], b[i]), u, permutation_type="independent",
                                             n_resamples=np.inf, alternative="two-sided").pvalue
            else:
                ref = stats.mannwhitneyu(a[i], b[i], method="asymptotic").pvalue
            assert p[i] == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_mann_whitney_edges():
    p, _ = mann_whitney(np.ones((2, 5)), np.ones((2, 5)))
    assert (p == 1).all()  # all tied
    p, _ = mann_whitney(np.zeros((1, 0)), np.ones((1, 3)))
    assert np.isnan(p).all()
    assert min_p_value(3, 3) == pytest.approx(0.1) and min_p_value(4, 4) == pytest.approx(2 / 70)
    assert min_p_value(0, 5) == 1.0


def test_false_positive_rate_without_change():
    """Rows whose two runs come from one distribution are called changed at most alpha of
    the time: 5 vs 5 steps (exact; 8/252 = 3.2% is the largest attainable p below 0.05)
    and 12 vs 12 steps (normal approximation)."""
    rng = np.random.default_rng(1)
    for n, lo, hi in ((5, 0.02, 0.045), (12, 0.035, 0.06)):
        x = rng.lognormal(size=(4000, 2 * n))  # skewed, like step times
        p, _ = mann_whitney(x[:, :n], x[:, n:])
        assert lo < (p < 0.05).mean() < hi
        assert (p < 0.05).mean() <= 0.05 + 0.01


def test_window_chooses_the_steps_of_both_runs(kineto_files, tmp_path):
    """`polyprof diff A B --skip-first 1`: every trace of both runs loses its first step,
    in the totals and in the test; the totals are those of the analyses on that window
    (kernel_breakdown, op_stats), the directory path (workers) included."""
    import polyprof.analyze as A
    from polyprof.analyze.window import Window

    f = next(p for p in kineto_files if p.name.startswith("v100"))
    t = polyprof.load(f)
    w = Window(skip_first=1)
    d = diff(t, t, window=w)
    assert d.overview["a"]["steps"] == 4 and "steps 102-105 of 101-105" in d.overview["a"]["window"]
    kb = A.kernel_breakdown(t, window=w)
    assert d.tables["kernels"]["total_ns_a"].sum() == kb["total_ns"].sum()
    assert d.tables["kernels"]["count_a"].sum() == kb["count"].sum() < A.kernel_breakdown(t)["count"].sum()
    assert d.tables["ops"]["count_a"].sum() == A.op_stats(t, window=w)["count"].sum()
    whole = diff(t, t)
    assert whole.overview["a"]["steps"] == 5 and whole.overview["a"]["window"].startswith("all 5 steps")
    da = tmp_path / "A"
    da.mkdir()
    shutil.copy(f, da / "rank0.json.gz")
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(da), str(f), "--skip-first", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["overview"]["a"]["steps"] == doc["overview"]["b"]["steps"] == 4
    assert sum(x["total_ns_a"] for x in doc["tables"]["kernels"]["records"]) == kb["total_ns"].sum()
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(f), str(f), "--steps", "7:9"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "101-105" in r.stderr
