"""polyprof diff: tables checked against the raw JSON (read with the stdlib), known changes
injected into real traces, name normalisation, the rank test, and real PyTorch CPU runs."""

from __future__ import annotations

import bisect
import collections
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import Runs, diff
from polyprof.analyze.names import normalize_name
from polyprof.analyze.ranktest import mann_whitney, min_p_value
from polyprof.errors import PolyprofError
from polyprof.report.names import ladder
from torch_matmuls import matmul_run

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
        doc = diff_json(a, b, "--all-steps", *extra)
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
    # the NCCL kernel runs only in B: new there, called by its role's name
    nccl = next(r for r in doc["tables"]["kernels"]["records"] if r["name"] == "nccl AllReduce kernel")
    assert all(n.startswith("ncclKernel_AllReduce") for n in nccl["raw_names"])
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
    doc = diff_json(injected["a"], injected["b"], "--raw-names", "--all-steps")
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
        assert rows and all(r["significant"] is False for r in rows)
    # (op_stats' merge of an op into its only child of the same name breaks ties between
    # ops of equal times by their order in the file, which dropping device events moves:
    # a few aten::view / as_strided / result_type calls count differently, a tiny share of the time)
    assert all(r["delta_total_ns"] == 0 for r in doc["tables"]["sections"]["records"])
    assert sum(abs(r["delta_total_ns"]) for r in doc["tables"]["ops"]["records"]) < 1e-4 * sum(
        r["total_ns_a"] for r in doc["tables"]["ops"]["records"])
    assert doc["step_time"]["significant"] is False
    # the verdict names the two changes, in their direction, and not the hiccup
    text = "\n".join(doc["verdict"]["text"])
    slower = next(l for l in text.splitlines() if l.startswith("Slower"))
    faster = next(l for l in text.splitlines() if l.startswith("Faster"))
    for line, name, way in ((slower, injected["k1"], "Slower"), (faster, injected["k2"], "Faster")):
        # a long name is cut in the middle, to 60 characters: its start and its end kept
        assert line.startswith(f"{way} in B (1): kernel {name[:35]}…{name[-24:]} "), (line, name)
    assert "174 of 176" in text  # everything else, the hiccup included, is within the noise
    assert {c["name"]: c["change"] for c in doc["verdict"]["changes"]} == {injected["k1"]: "slower",
                                                                           injected["k2"]: "faster"}


def test_terminal_table_and_verdict(injected):

    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(injected["a"]), str(injected["b"]), "-n", "3",
                        "--raw-names"],
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
    assert row["significant"] is True and row["change"] == "slower" and row["p_adjusted"] < 0.05
    assert doc["overview"]["ranks"] == [0, 1] and row["rank_decided"] == -1  # both ranks: the combination
    assert [c["name"] for c in doc["verdict"]["changes"]] == [row["name"]]
    # one rank alone has 1 step a side (the t test needs 2): it cannot be tested, and says so
    one = diff_json(da / "rank0.json.gz", db / "rank0.json.gz", "--steps", "551")
    assert "1 vs 1 samples" in one["overview"]["untestable"]
    assert all(r["significant"] is None for r in one["tables"]["kernels"]["records"])
    assert "No change is called significant" in "\n".join(one["verdict"]["text"])


def test_api_takes_traces_and_sequences(kineto_files):
    ranks = [polyprof.load(next(f for f in kineto_files if f.name == f"sampled_rank{i}.json.gz")) for i in (0, 1)]
    both = diff(ranks, (t for t in ranks))  # a generator is consumed one trace at a time
    one = diff(ranks[0], ranks[0])
    # one trace a side: compared whatever their ranks (rank 0 of one run against rank 1 of another)
    cross = diff(ranks[0], ranks[1])
    assert cross.overview["untestable"] is None and cross.overview["ranks_not_tested"] == {"a": [], "b": []}
    assert cross.overview["a"]["ranks"] == [0] and cross.overview["b"]["ranks"] == [1]
    k, k0 = both.tables["kernels"].to_pandas(), one.tables["kernels"].to_pandas()
    assert (k["delta_total_ns"] == 0).all() and (k["significant"] == False).all()  # noqa: E712
    # two ranks' counts add up
    c = k.set_index("name")["count_a"]
    c0 = k0.set_index("name")["count_a"]
    c1 = diff(ranks[1], ranks[1]).tables["kernels"].to_pandas().set_index("name")["count_a"]
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
            np.testing.assert_allclose(np.asarray(got["p_value"], float), np.asarray(want["p_value"], float))


def test_no_steps_cannot_be_tested(kineto_files):
    f = next(f for f in kineto_files if f.name.startswith("a100_alexnet"))
    doc = diff_json(f, f)
    assert doc["overview"]["untestable"].startswith("run A and B have no steps")
    assert all(r["significant"] is None and r["p_value"] is None for r in doc["tables"]["kernels"]["records"])
    assert doc["step_time"]["steps_a"] == 1 and doc["step_time"]["unit"] == "trace"  # the whole trace, one sample
    t = polyprof.load(f)
    d = diff(t, t)
    assert all(v is None for v in d.tables["kernels"]["significant"].tolist()) and "no steps" in d.text


def test_xspace_tpu_trace_diffs_with_itself(traces_dir):
    t = polyprof.load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb")
    d = diff(t, t)
    k = d.tables["kernels"].to_pandas().set_index("name")
    # XLA's instance numbers are stripped: copy-done, copy-done.1 ... copy-done.5 are one row
    assert k.loc["copy-done", "variants"] == 6 and k.loc["copy-done", "count_a"] == 2400
    assert (k["delta_total_ns"] == 0).all()


def _torch_run(torch, path: Path, size: int, steps: int = 8) -> Path:
    """A real torch.profiler CPU trace: ``steps`` recorded steps of a matmul of ``size``."""
    return matmul_run(torch, path, size, steps, 3)


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
    # summary's window: the first of the 8 recorded steps is left out
    assert d.overview["untestable"] is None and d.step_time["steps_a"] == d.step_time["steps_b"] == 7
    ops = d.tables["ops"].to_pandas().set_index("name")
    assert ops.loc["aten::mm", "count_a"] == ops.loc["aten::mm", "count_b"] == 21
    assert ops.loc["aten::mm", "change"] == "slower" and ops.loc["aten::mm", "p_value"] < 0.05
    sec = d.tables["sections"].to_pandas().set_index("name")
    assert sec.loc["work", "change"] == "slower" and sec.loc["work", "count_a"] == 7
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
    ("input_transpose_fusion.kd", "input_transpose_fusion"),
    ("loop_add_fusion.3.kd", "loop_add_fusion"),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1.kd", "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1"),
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
    assert diff(t, t).overview["a"]["steps"] == 4  # the default is summary's window (AUTO)
    whole = diff(t, t, window=None)
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


# ----------------------------------------------------------------- false alarms and real changes
def synthetic_run(rng: np.random.Generator, base_us: np.ndarray, noise: np.ndarray, steps: int = 10,
                  slow: dict[int, float] | None = None, rank: int | None = None, run_factor: float = 1.0):
    """One run of a workload of ``len(base_us)`` kernels: per step, kernel i runs once for
    base_us[i] x lognormal(0, noise[i]) µs (x ``slow[i]``, x ``run_factor``), on one
    stream, inside ProfilerStep#k on the host."""
    from polyprof.trace import TraceBuilder

    slow = slow or {}
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=100 + (rank or 0))
    th = b.track(host, "main", "thread", tid=1)
    gpu = b.plane("/device:GPU:0", "device", vendor="nvidia", index=0)
    s7 = b.track(gpu, "stream 7", "stream", tid=7)
    factor = np.array([slow.get(i, 1.0) for i in range(len(base_us))]) * run_factor
    step_ns = int(base_us.sum() * 1000 * 2)
    for k in range(steps):
        o = k * step_ns
        b.event(th, f"ProfilerStep#{k}", o, step_ns, "user_annotation")
        dur = base_us * factor * rng.lognormal(0.0, noise) * 1000
        t = o + 1000
        for i, d in enumerate(dur.astype(np.int64).tolist()):
            b.event(s7, f"kernel_{i:03d}", t, d, "kernel", stream=7, device=0)
            t += d + 500
    tr = b.build()
    if rank is not None:
        tr.metadata["rank"] = rank
    return tr


def workload(rng: np.random.Generator, names: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Kernels of 30 µs to 2 ms per step, each with its own step-to-step noise of 1-5%
    (the per-step totals of the real V100 trace's kernels vary by 0.01-4%, median 0.4%)."""
    return np.exp(rng.uniform(np.log(30), np.log(2000), names)), rng.uniform(0.01, 0.05, names)


def test_a_a_synthetic_pairs_call_no_change():
    """200 kernels drawn from one distribution for A and B, 50 times: no significant row in
    at least 95% of the repetitions (Holm keeps the family-wise rate at 5%), and the
    verdict says "no significant change" each time no row is called."""
    rng = np.random.default_rng(28)
    base, noise = workload(rng)
    clean, tested = 0, []
    for _ in range(50):
        d = diff(synthetic_run(rng, base, noise), synthetic_run(rng, base, noise))
        tested.append(d.overview["rows_tested"])
        if not d.changed:
            clean += 1
            assert d.verdict[0].startswith("No significant change")
        else:
            assert not d.verdict[0].startswith("No significant change")
    assert clean >= 48, clean
    assert min(tested) == 200  # every row reaches the floor: all 200 are in the family


def test_one_kernel_20_percent_slower_is_flagged_and_nothing_else():
    rng = np.random.default_rng(33)
    base, noise = workload(rng)
    slow = int(np.argsort(base)[100])  # a median kernel: ~250 µs per step
    found, others = 0, 0
    for _ in range(20):
        d = diff(synthetic_run(rng, base, noise), synthetic_run(rng, base, noise, slow={slow: 1.2}))
        names = {c["name"]: c for c in d.changes}
        if f"kernel_{slow:03d}" in names:
            found += 1
            c = names[f"kernel_{slow:03d}"]
            assert c["change"] == "slower" and c["table"] == "kernels"
            assert 0.1 < (c["step_mean_ns_b"] / c["step_mean_ns_a"] - 1) < 0.3
        others += len(set(names) - {f"kernel_{slow:03d}"})
    assert found == 20 and others <= 1, (found, others)


def test_floor_and_correction_are_settable():
    rng = np.random.default_rng(5)
    base, noise = workload(rng, 50)
    slow = int(np.argmax(base))
    noise[slow] = 0.01
    a, b = synthetic_run(rng, base, noise), synthetic_run(rng, base, noise, slow={slow: 1.08})
    row = lambda d: next(r for r in d.changes if r["name"] == f"kernel_{slow:03d}")  # noqa: E731
    assert row(diff(a, b))["change"] == "slower"  # 8% > the 5% floor
    d = diff(a, b, rel_floor=0.10)
    assert not any(c["name"] == f"kernel_{slow:03d}" for c in d.changes)
    k = d.tables["kernels"]
    i = list(k["name"]).index(f"kernel_{slow:03d}")
    assert k["reason"][i] == "below the effect floor" and k["p_adjusted"][i] < 0.05
    d = diff(a, b, abs_floor_ns=10 ** 9)  # nothing reaches a second per step: nothing is tested
    assert d.overview["rows_tested"] == 0 and not d.changes
    assert row(diff(a, b, correction="bh"))["change"] == "slower"
    assert row(diff(a, b, test="rank"))["change"] == "slower"  # 9 vs 9 steps: exact p 4e-5
    with pytest.raises(PolyprofError, match="correction"):
        diff(a, b, correction="bonferroni")
    with pytest.raises(PolyprofError, match="floors"):
        diff(a, b, rel_floor=-1)


def test_a_change_on_one_rank_shows():
    """Four ranks; in B one kernel is 30% slower on rank 2 only. Pooled, the change is
    diluted among four ranks' samples; tested per rank it is called, on rank 2."""
    rng = np.random.default_rng(2)
    base, noise = workload(rng, 40)
    k = int(np.argsort(base)[20])
    a = [synthetic_run(rng, base, noise, rank=r) for r in range(4)]
    b = [synthetic_run(rng, base, noise, rank=r, slow={k: 1.3} if r == 2 else None) for r in range(4)]
    d = diff(a, b)
    assert d.overview["ranks"] == [0, 1, 2, 3]
    assert [(c["name"], c["rank_decided"], c["change"]) for c in d.changes] == [(f"kernel_{k:03d}", 2, "slower")]
    c = d.changes[0]
    assert 0.25 < c["rank_step_mean_ns_b"] / c["rank_step_mean_ns_a"] - 1 < 0.35  # the effect on that rank
    assert 0.05 < c["step_mean_ns_b"] / c["step_mean_ns_a"] - 1 < 0.11  # per step and rank: the mean over the four
    # the same samples pooled as one rank (one merged sample per side) are far less clear
    from polyprof.analyze.diff_stats import Samples, compare

    d_rank = d.tables["kernels"]
    i = list(d_rank["name"]).index(f"kernel_{k:03d}")
    pooled = compare(*(Samples(np.array([[s for t in side for s in _kernel_steps(t, k)]]),
                               np.zeros(36, np.int64), np.zeros(36, np.int64)) for side in (a, b)))
    assert pooled.p[0] > 100 * d_rank["p_value"][i]
    # ranks matched by number: a rank in one run only is named, not tested
    d = diff(a, b[:3])
    assert d.overview["ranks"] == [0, 1, 2] and d.overview["ranks_not_tested"] == {"a": [3], "b": []}
    assert any("only in A: 3" in line for line in d.verdict)


def _kernel_steps(trace, k: int) -> list[float]:
    """Per-step totals of kernel k in the steps summary's window analyses (2..10)."""
    from polyprof.analyze.diff_sums import summarize

    t = summarize(trace).tables["kernels"]
    j = t.names.index(f"kernel_{k:03d}")
    return t.pair_total[t.pair_name == j].astype(float).tolist()


def test_replicates_use_run_to_run_variance():
    """Each run of the workload is a few percent off as a whole (another node, a warmer
    cache): the runs differ by more than the step-to-step noise. One run a side calls
    that run-to-run difference a change; six runs a side test against the runs' spread
    and call nothing, yet still call a real 40% slowdown."""
    rng = np.random.default_rng(11)
    base, noise = workload(rng, 60)
    noise = noise / 5  # steady steps ...
    factors = iter(rng.lognormal(0.0, 0.08, 100))  # ... and runs some 8% apart

    def runs(n: int, slow: dict[int, float] | None = None) -> list:
        return [[synthetic_run(rng, base, noise, steps=6, slow=slow, run_factor=next(factors))] for _ in range(n)]

    a, b = runs(6), runs(6)
    single = [len(diff(a[i][0], b[i][0]).changes) for i in range(6)]
    assert sum(single) > 20, single  # run-to-run differences read as changes
    d = diff(Runs(a), Runs(b))
    assert d.overview["a"]["runs"] == d.overview["b"]["runs"] == 6
    assert "run-to-run" in d.overview["test"] and not d.changes and d.verdict[0].startswith("No significant change")
    k = int(np.argmax(base))
    d = diff(a, runs(6, slow={k: 1.4}))  # a list of runs (lists of traces) is replicates too
    assert [(c["name"], c["change"]) for c in d.changes] == [(f"kernel_{k:03d}", "slower")]


def test_two_runs_a_side_with_warm_up_in_one_side_only_is_no_change():
    """Two runs a side; in one op both A runs happen to have 3 warm-up steps 8x the rest
    (page faults of fresh memory), both B runs none: the runs' means lie close on each
    side, so their spread alone gave p 1e-4 (CI, a real torch A/A run, called 62% faster).
    The runs' typical steps (medians) did not move: no change. An op 30% slower in every
    step of both B runs is still called."""
    from polyprof.analyze.diff_stats import Samples, compare

    rng = np.random.default_rng(3)
    steps, run = 12, np.repeat([0, 1], 12)
    a = 19_000 * rng.lognormal(0, 0.03, (2, 2 * steps))
    b = 19_000 * rng.lognormal(0, 0.03, (2, 2 * steps))
    a[0, [1, 2, 3, 13, 14, 15]] *= 8  # the warm-up of A's runs
    b[1] *= 1.3  # a real change
    got = compare(Samples(a, run, np.zeros(2 * steps, int)), Samples(b, run, np.zeros(2 * steps, int)))
    assert got.p[0] > 0.2 and got.p[1] < 0.01, got.p


def test_two_runs_a_side_call_an_op_of_a_few_steps_by_its_means():
    """An op in 3 of every 12 steps (a checkpoint), 3x longer in B's two runs: its typical
    step is its absence, so it is tested by the runs' means alone, and called (the medians'
    test, 0 against 0, gave p 1 and hid it)."""
    from polyprof.analyze.diff_stats import Samples, compare

    rng = np.random.default_rng(4)
    steps, run = 12, np.repeat([0, 1], 12)
    a, b = np.zeros((1, 2 * steps)), np.zeros((1, 2 * steps))
    every4 = np.arange(0, 2 * steps, 4)
    a[0, every4] = 400_000 * rng.lognormal(0, 0.05, len(every4))
    b[0, every4] = 1_200_000 * rng.lognormal(0, 0.05, len(every4))
    got = compare(Samples(a, run, np.zeros(2 * steps, int)), Samples(b, run, np.zeros(2 * steps, int)))
    assert got.p[0] < 0.01, got.p


def test_renamed_dataloader_iterator_is_one_row(tmp_path):
    """A DataLoader made multi-process: the iterator's annotation is renamed and its time
    drops; diffed, it is one row (the same role), faster, not "gone" plus "new"."""
    from polyprof.analyze.roles import role_name
    from polyprof.trace import TraceBuilder

    single = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    multi = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    assert role_name(single) == role_name(multi) == "enumerate(DataLoader)#DataLoaderIter.__next__"
    assert role_name("Memcpy HtoD (Pageable -> Device)") == role_name("Memcpy HtoD (Pinned -> Device)")
    assert role_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == \
        role_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
    assert role_name("Optimizer.step#SGD.step") == role_name("Optimizer.step#AdamW.step") == "Optimizer.step"
    assert role_name("volta_sgemm_64x64_nt") == "volta_sgemm_64x64_nt"

    rng = np.random.default_rng(1)

    def run(loader: str, loader_us: float):
        b = TraceBuilder()
        th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
        for k in range(8):
            o = k * 20_000_000
            b.event(th, f"ProfilerStep#{k}", o, 20_000_000, "user_annotation")
            b.event(th, loader, o + 1000, int(loader_us * 1000 * rng.lognormal(0, 0.03)), "user_annotation")
        return b.build()

    d = diff(run(single, 9000), run(multi, 400))
    s = d.tables["sections"]
    assert list(s["name"]) == ["enumerate(DataLoader)#DataLoaderIter.__next__"]
    assert list(s["raw_names"])[0] == sorted([multi, single]) and list(s["change"]) == ["faster"]
    raw = diff(run(single, 9000), run(multi, 400), normalize=False).tables["sections"]
    assert len(raw) == 2  # without the rules: one gone, one new


TRAIN = '''
import os
import sys

if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(sys.argv[2])})  # every run on one CPU
import torch
import torch.nn.functional as F

# the runs take turns step by step around a ring of FIFOs (this run's, the next run's),
# so the machine's other load, however it comes and goes, falls on every run alike
mine, nxt = (os.open(f, os.O_RDWR) for f in sys.argv[4:6])  # (O_RDWR: a FIFO's open never blocks)
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
record = torch.profiler.record_function
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            schedule=torch.profiler.schedule(wait=0, warmup=1, active=12, repeat=1),
                            on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for i in range(13):
        if i or sys.argv[3] != "0":
            assert os.read(mine, 1) == b"."  # the run before this one has done its step
        with record("forward"):
            loss = F.cross_entropy(model(x), y)
        with record("backward"):
            loss.backward()
        with record("optimizer"):
            opt.step()
            opt.zero_grad()
        prof.step()
        os.write(nxt, b".")  # the next run's turn
'''


def test_a_a_real_torch_runs_call_no_change(tmp_path):
    """The same small torch CPU training script run four times at once on one CPU (A1,
    B1, A2, B2, taking turns step by step), each writing its torch.profiler trace:
    `polyprof diff A1 A2 -- B1 B2` calls nothing changed. Taking turns puts the machine's
    other load on every run alike; several runs a side let the diff weigh run-to-run
    variance, which is large: two processes of this script differ by as much as 30% in
    some ops for the whole run (with one run a side no diff can tell that from a change,
    and it says so; the two cycles of one process were no help either: the second ran
    8-15% faster)."""
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    names = ("a1", "b1", "a2", "b2")
    ring = [tmp_path / f"turn{k}" for k in range(len(names))]
    for f in ring:
        os.mkfifo(f)
    cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / f"{n}.json"), str(cpu), str(k),
                               str(ring[k]), str(ring[(k + 1) % len(ring)])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for k, n in enumerate(names)]
    try:
        errs = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:  # one that failed leaves the others waiting for their turn
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * len(procs), errs
    a1, b1, a2, b2 = (str(tmp_path / f"{n}.json") for n in names)
    r = cli("diff", a1, a2, "--", b1, b2, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["overview"]["rows_tested"] >= 10  # the matmuls, their backward, the sections ...
    assert doc["verdict"]["changes"] == [] and doc["step_time"]["change"] == "", doc["verdict"]
    assert doc["verdict"]["text"][0].startswith("No significant change")


def test_real_trace_one_kernel_20_percent_slower(kineto_files):
    """The V100 trace and a copy with one kernel 20% longer in every step: that kernel is
    called slower, nothing else is (4 vs 4 steps: summary's window)."""
    import dataclasses

    t = polyprof.load(next(f for f in kineto_files if f.name.startswith("v100_ns")))
    names = np.array(t.strings, dtype=object)[t.events["name"]]
    device = np.isin(t.events["category"], [t.strings.index(c) for c in DEVICE_CATS if c in t.strings])
    total = collections.Counter()
    for n, d in zip(names[device].tolist(), t.events["dur_ns"][device].tolist()):
        total[n] += d
    target = [n for n, _ in total.most_common() if not n.startswith("Memcpy")][5]
    hit = device & (names == target)
    dur = t.events["dur_ns"].copy()
    dur[hit] = np.round(dur[hit] * 1.2).astype(dur.dtype)
    b = dataclasses.replace(t, events={**t.events, "dur_ns": dur})
    d = diff(t, b, normalize=False)
    assert [(c["name"], c["change"]) for c in d.changes] == [(target, "slower")], d.text
    assert d.verdict[0].startswith("Changes in B: 1 row(s) slower, 0 faster")


def test_terminal_at_80_columns_keeps_p_and_change(injected):
    """`COLUMNS=80 polyprof diff A B`: every table keeps its p and change columns, names
    shortened in the middle; what was left out is named once, with --wide."""

    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(injected["a"]), str(injected["b"]), "-n", "5",
                        "--raw-names"], capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(l) for l in lines) <= 80
    heads = [l for l in lines if l.startswith("┃")]
    assert len(heads) == 3  # kernels, ops, sections
    for h in heads:
        cells = [c.strip() for c in h.strip("┃").split("┃")]
        assert cells[0] == "name" and cells[-3:] == ["Δ%/step", "p", "change"]
    row = next(l for l in lines if "slower" in l and l.count("│") > 3)  # K1, the one slower row
    assert "…" in row and "+30.0%" in row
    # the name shortened (report/names.py: its base name, "vectorized_elementwise_kernel",
    # or its template arguments where another row has that base name too) and cut: pieces
    # of one of its shortened forms, in order
    name = row.split("│")[1].strip()
    pieces = [p for p in name.split("…") if p]

    def in_order(text: str) -> bool:
        at = 0
        for p in pieces:
            at = text.find(p, at)
            if at < 0:
                return False
            at += len(p)
        return True

    assert pieces and any(in_order(form) for form in ladder(injected["k1"])), name
    notes = [l for l in lines if l.startswith("Left out to fit 80 columns")]
    assert len(notes) == 1 and "--wide" in notes[0] and "total A" in notes[0]
    # a column said left out without "in TABLE" is in no table (the Sections table kept
    # "total A" where the footer named it as left out of every table, before)
    footer = " ".join(lines[lines.index(notes[0]):]).split(": ", 1)[1].split(" (--wide")[0]
    shown = {c.strip() for h in heads for c in h.strip("┃").split("┃")}
    for part in footer.split("; "):
        if " in " not in part:
            assert not set(part.split(", ")) & shown, (part, shown)
    wide = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(injected["a"]), str(injected["b"]), "-n", "5",
                           "--wide"], capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "80"})
    assert "total A" in wide.stdout and "Left out" not in wide.stdout


def test_cli_replicates_before_and_after_the_separator(injected, tmp_path):
    """`polyprof diff A1 A2 -- B1 B2` and directories of run directories are the same
    diff: two runs a side, tested over the runs; options may follow the runs."""
    runs = {}
    for side, src in (("A", injected["a"]), ("B", injected["b"])):
        for i in (1, 2):
            d = tmp_path / side / f"run{i}"
            d.mkdir(parents=True)
            # the second run recompressed: its events the first's, its bytes not (a byte copy
            # is refused as one trace given twice)
            text = gzip.decompress(Path(src).read_bytes())
            (d / "rank0.json.gz").write_bytes(gzip.compress(text, compresslevel=9 if i == 1 else 1))
            runs[f"{side}{i}"] = d / "rank0.json.gz"
    r = cli("diff", str(runs["A1"]), str(runs["A2"]), "--", str(runs["B1"]), str(runs["B2"]), "--json",
            "--raw-names")
    assert r.returncode == 0, r.stderr
    flat = json.loads(r.stdout)
    r = cli("diff", "--json", "--raw-names", str(tmp_path / "A"), str(tmp_path / "B"))
    assert r.returncode == 0, r.stderr
    nested = json.loads(r.stdout)
    for doc in (flat, nested):
        assert doc["overview"]["a"]["runs"] == doc["overview"]["b"]["runs"] == 2
        assert "run-to-run" in doc["overview"]["test"]
        changed = {c["name"]: c["change"] for c in doc["verdict"]["changes"]}
        # copies: no run-to-run variance at all, so the one-step hiccup of k3 (+5% a step) counts too
        assert changed[injected["k1"]] == "slower" and set(changed) <= {injected[k] for k in ("k1", "k2", "k3")}
        k = records(doc, "kernels")
        assert k[injected["k1"]]["count_a"] == k[injected["k1"]]["count_b"]  # per run, not summed over runs
    assert flat["tables"] == nested["tables"]
    r = cli("diff", str(runs["A1"]), "--", str(runs["B1"]), "--bogus")
    assert r.returncode == 1 and "--bogus" in r.stderr and r.stderr.count("\n") == 1
    r = cli("diff", str(runs["A1"]), "--")
    assert r.returncode == 1 and "after `--`" in r.stderr


def test_html_diff_renders_its_charts_in_headless_chromium(injected, tmp_path):
    """`polyprof diff A B -o diff.html`: one self-contained page (nothing fetched) that
    headless Chromium draws without a script error: the verdict, a bar per change in
    its colour, the per-step distributions (a dot per step of each run), the three
    tables with A's and B's columns side by side."""
    import re

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from analysis import browser

    if browser.chromium() is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    html = tmp_path / "diff.html"
    r = cli("diff", str(injected["a"]), str(injected["b"]), "--raw-names", "-o", str(html), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    page = html.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing loaded from anywhere
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    dom, log = browser.dump_dom(html)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root and "data-js-errors" not in root, root
    assert not [line for line in log.splitlines() if "Uncaught" in line]
    assert "Changes in B: 1 row(s) slower, 1 faster" in dom
    chart = dom.split('id="changes-svg"', 1)[1].split("</svg>", 1)[0]
    assert chart.count('class="bar slower"') == 1 and chart.count('class="bar faster"') == 1
    text = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731  (as in the DOM)
    assert text(injected["k1"]) in chart and text(injected["k2"]) in chart  # each bar's title: the full name
    dists = dom.split('id="dists"', 1)[1].split("</section>", 1)[0]
    assert dists.count('dist-svg"') == dists.count("<svg") >= 3  # step time and the two changes at least
    steps = doc["overview"]["a"]["steps"]
    assert dists.count('class="dot a"') == dists.count('class="dot b"') == steps * dists.count("<svg")
    kernels = dom.split('id="kernels-table"', 1)[1].split("</table>", 1)[0]
    assert "run A" in kernels and "run B" in kernels
    assert kernels.count("<tr") == 2 + len(doc["tables"]["kernels"]["records"])  # two header rows
    png = browser.screenshot(html, tmp_path / "shot.png", height=1800)
    w, h, rows = browser.read_png(png)
    bpp = len(rows[0]) // w

    def count(color, tol=24):
        return sum(1 for row in rows for x in range(0, w * bpp, bpp)
                   if all(abs(row[x + i] - color[i]) <= tol for i in range(3)))

    assert count((0xC0, 0x39, 0x2B)) > 100, "no slower bar painted"
    assert count((0x1E, 0x84, 0x49)) > 100, "no faster bar painted"
    assert count((0x3B, 0x73, 0xC4)) > 50 and count((0xE8, 0x91, 0x3A)) > 50, "no step dots painted"


def test_html_diff_of_an_a_a_pair_says_no_change(tmp_path):
    """The page of an A/A pair: the headline says no change, the chart has no coloured bar."""
    from polyprof.report.diff_html import page_data, render

    rng = np.random.default_rng(3)
    base, noise = workload(rng, 30)
    d = diff(synthetic_run(rng, base, noise), synthetic_run(rng, base, noise))
    data = page_data(d)
    assert not d.changes and data["verdict"][0].startswith("No significant change")
    assert data["chart"] and all(r["change"] == "" for r in data["chart"])
    assert data["samples"][0]["name"] == "step time" and len(data["samples"][0]["a"]["ns"]) == 9
    assert "__DATA__" not in render(d)


def test_everything_moving_together_is_named_as_such():
    """One run a side, B's machine 30% slower for everything: the verdict calls the rows
    and the step time slower, and says that this is what a change of the machine looks
    like, with the way to tell (several runs a side)."""
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(9)
    base, noise = workload(rng, 20)

    def run(factor: float):
        b = TraceBuilder()
        th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
        for k in range(8):
            o = k * 50_000_000
            step = int(40_000_000 * factor * rng.lognormal(0, 0.01))
            b.event(th, f"ProfilerStep#{k}", o, step, "user_annotation")
            t = o + 1000
            for i, d in enumerate((base * factor * rng.lognormal(0, noise) * 1000).astype(np.int64).tolist()):
                b.event(th, f"aten::op{i}", t, d, "cpu_op")
                t += d + 100
        return b.build()

    d = diff(run(1.0), run(1.3))
    assert d.step_time["change"] == "slower" and len(d.changes) >= 3
    assert any(line.startswith("The step time and every changed row moved together (slower)") for line in d.verdict)


def test_the_command_does_not_import_pandas(injected, tmp_path):
    """`polyprof diff` computes its tables as polyprof's Tables: the terminal, the JSON and
    the HTML outputs never import pandas (0.3-0.9 s of a fresh process)."""
    code = ("import io, sys\nfrom polyprof.cli import main\nout = sys.stdout\n"
            "sys.stdout = io.TextIOWrapper(io.BytesIO())\n"
            f"assert main(['diff', {str(injected['a'])!r}, {str(injected['b'])!r}, '-o', {str(tmp_path / 'd.html')!r}]) "
            "== 0\n"
            f"assert main(['diff', {str(injected['a'])!r}, {str(injected['b'])!r}, '--json']) == 0\n"
            "sys.stdout = out\nprint('pandas' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_amd_kernel_descriptor_names_match_across_runs():
    """TraceLens's two MI300X runs of one JAX convolution: the legacy run names its kernels
    by their code objects' descriptor symbols (``input_transpose_fusion.kd``), the other
    without the ``.kd``; each kernel was "gone" in one and "new" in the other."""
    peers = Path(__file__).parent / "data" / "peers" / "tracelens"
    doc = diff_json(peers / "jax_conv_minimal_08.xplane.pb", peers / "jax_conv_minimal_legacy.xplane.pb")
    k = records(doc, "kernels")
    fusion = k["jit_forward_3d_conv/input_transpose_fusion"]  # (a row of its module: its hlo_module stat)
    assert fusion["count_a"] == 40 and fusion["count_b"] == 5
    assert sorted(fusion["raw_names"]) == ["jit_forward_3d_conv/input_transpose_fusion",
                                           "jit_forward_3d_conv/input_transpose_fusion.kd"]
    assert not [n for n in k if n.endswith(".kd")]


def test_steps_alike_their_neighbours_are_not_counted_as_independent():
    """A run's steps drift together (warm-up, the machine's load): on AR(1) series of 20
    steps a side, r 0.8, Student's t over the steps as independent samples rejected 55%
    of A/A pairs at 5%; with the serial factor (``ranktest._serial_factor``) about 10%,
    while independent steps keep their rejection rate and their power."""
    from polyprof.analyze.ranktest import student_groups

    rng = np.random.default_rng(7)

    def ar(rho: float, k: int = 3000, n: int = 20) -> np.ndarray:
        e = rng.normal(size=(k, n))
        x = np.empty((k, n))
        x[:, 0] = e[:, 0] / np.sqrt(1 - rho ** 2)
        for i in range(1, n):
            x[:, i] = rho * x[:, i - 1] + e[:, i]
        return x

    rate = lambda a, b, serial: float((student_groups(a, b, serial=serial)[2] < 0.05).mean())  # noqa: E731
    a, b = ar(0.8), ar(0.8)
    assert rate(a, b, False) > 0.4 and rate(a, b, True) < 0.15
    a, b = ar(0.0), ar(0.0)
    assert abs(rate(a, b, True) - 0.05) < 0.02 and rate(a, b, True) <= rate(a, b, False) + 0.005
    a, b = ar(0.0), ar(0.0) + 1.0  # one sd apart
    assert rate(a, b, True) > rate(a, b, False) - 0.05


def test_new_or_repeated_calls_are_called_the_programs_change():
    """One run a side, the step time and every changed row slower together: the verdict
    said that is what a change of the machine or its load looks like, also when B ran
    a kernel A never ran. Calls a machine cannot add are named as the program's change;
    the step time called slower keeps the caveat of one run a side (the other work
    proves the program changed, not that the step's time did: tests/test_diff_loop.py),
    without calling the new kernel a row that "moved together" with it."""
    rng = np.random.default_rng(12)
    base, noise = workload(rng, 20)
    more_base, more_noise = np.append(base, 900.0), np.append(noise, 0.02)
    d = diff(synthetic_run(rng, base, noise), synthetic_run(rng, more_base, more_noise))
    text = " ".join(d.verdict)
    assert "B runs other work: kernel kernel_020 new" in text and "the program changed" in text
    assert "moved together" not in text and "moved unalike" not in text
    if d.step_time["change"]:
        assert d.verdict[-1].startswith("One run a side: the times called changed (the step time +"), d.verdict


def test_calls_that_come_and_go_with_scheduling_are_not_the_programs_change():
    """A runtime's waits and polls are called as often as scheduling makes them (JAX's
    CPU thread pool: ``Wait: pending_threads=2/4`` 8.43 then 7.29 times per step in two
    runs of one script): the verdict called such a count "other work ... the program
    changed". Only a row called the same number of times in every step of each side
    tells a program's change; the kernel added to every step of B still does."""
    from polyprof.trace import TraceBuilder

    def run(rng: np.random.Generator, polls: list[int], extra: bool = False):
        b = TraceBuilder()
        host = b.plane("/host:CPU", "host", pid=100)
        th = b.track(host, "main", "thread", tid=1)
        gpu = b.plane("/device:GPU:0", "device", vendor="nvidia", index=0)
        s7 = b.track(gpu, "stream 7", "stream", tid=7)
        for k, n in enumerate(polls):
            o = k * 10_000_000
            b.event(th, f"ProfilerStep#{k}", o, 9_000_000, "user_annotation")
            t = o + 1000
            for i, d in enumerate((rng.lognormal(0.0, 0.02, 5) * 400_000).astype(np.int64).tolist()):
                b.event(s7, f"kernel_{i}", t, d, "kernel", stream=7, device=0)
                t += d + 500
            for _ in range(n + (2 if extra else 0)):
                name = "extra_kernel" if extra and _ >= n else "poll"
                b.event(s7, name, t, 300_000, "kernel", stream=7, device=0)
                t += 300_500
        return b.build()

    rng = np.random.default_rng(5)
    a = run(rng, [5, 3, 6, 4, 5, 3, 6, 4, 5, 3, 6, 4])
    b = run(rng, [1, 2, 1, 2, 1, 3, 1, 2, 1, 2, 1, 2])  # fewer polls per step, not in every step alike
    d = diff(a, b)
    steady = dict(zip(d.tables["kernels"]["name"].tolist(), d.tables["kernels"]["steady_calls"].tolist()))
    assert steady == {"poll": False, **{f"kernel_{i}": True for i in range(5)}}
    assert "B runs other work" not in " ".join(d.verdict)
    d = diff(a, run(rng, [5, 3, 6, 4, 5, 3, 6, 4, 5, 3, 6, 4], extra=True))  # 2 more calls in every step
    assert "B runs other work: kernel extra_kernel new" in " ".join(d.verdict)


def _slept_steps(ms: list[float]) -> polyprof.Trace:
    import time

    with polyprof.profile(["host"], options={"host": {"sample_interval_s": 0}}) as s:
        for m in ms:
            with polyprof.section("work"):
                time.sleep(m / 1000)
            polyprof.step()
    return s.trace


def test_a_stall_that_moves_the_mean_is_named():
    """B's steps are A's but one, 15x longer (a rank that waited once): the mean moves
    by several times, the test (every step alike) calls no change, and the verdict says
    that one step moved the mean, how long it took against the median."""
    from polyprof.analyze.units import fmt_ns

    a = _slept_steps([10.0] * 7)
    b = _slept_steps([10.0] * 3 + [150.0] + [10.0] * 3)
    r = diff(a, b)
    text = "\n".join(r.verdict)
    st = r.step_time
    assert not st["change"] and st["mean_ns_b"] > 2 * st["mean_ns_a"], text
    assert st["stalls_b"] == 1 and st["longest_ns_b"] >= 150e6 and st["stalls_a"] == 0
    ratio = st["longest_ns_b"] / st["median_ns_b"]
    assert f"B's longest step took {fmt_ns(st['longest_ns_b'])}, {ratio:,.0f}x its median step" in text, text
    assert "one stall moves its mean" in text and ratio >= 5, text
    same = diff(a, _slept_steps([10.0] * 7))
    assert "stall" not in "\n".join(same.verdict)
