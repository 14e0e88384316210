"""The share of kernel time in replays of CUDA graphs captured before the trace (their
FLOPs cannot be counted, so the MFU is a floor or unknown) as a declared result beside
the MFU: ``mfu``'s ``uncounted_replay_pct`` in ``summary --json``, in the HTML report's
overview, and in a store's rank summarised window by window. Real H200 traces
(tests/data/h200/README.md): the compiled train step with its captures cut out (as a
profile scheduled after torch.compile's first calls), a graph replayed alone, and
traces whose graphs are captured in the trace or that have none."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.efficiency import uncounted_replays
from polyprof.cli import main
from polyprof.ranks import fits, stepwise
from polyprof.report.tables import build

from analysis.browser import chromium, page_data

DATA = Path(__file__).parent / "data" / "h200"
REPLAYS_ONLY = DATA / "torch_cuda_graph_h200.json.gz"  # a graph captured before the profile, replayed 5 times
#: the memory bound (MiB) that sends a store's rank of STEPS steps window by window
LOW = str((fits.BASE_BYTES >> 20) + 1)
STEPS = 3000
H200 = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
        "numSms": 132}


@pytest.fixture(scope="module")
def no_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled train step without its graph captures: its replays' FLOPs unknown."""
    doc = json.loads(gzip.decompress((DATA / "torch_compile_train_h200.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "Capture" not in e.get("name", "")]
    p = tmp_path_factory.mktemp("uncounted") / "no_capture.json"
    p.write_text(json.dumps(doc))
    return p


def _overall(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    """The ``mfu`` table's whole-window row of ``summary --json``."""
    assert main(["summary", "--json", *args]) == 0
    records = json.loads(capsys.readouterr().out)["tables"]["mfu"]["records"]
    return next(r for r in records if r["step"] == -1)


def test_json_gives_the_share_beside_the_mfu(no_capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """90% of the analysed steps' kernel time ran in replays of uncaptured graphs: the MFU
    of the eager ops alone (0.001%) is a floor, and the JSON says by how much."""
    row = _overall(capsys, str(no_capture))
    want = uncounted_replays(build(polyprof.load(no_capture)).trace)  # the summary's window
    assert row["uncounted_replay_pct"] == pytest.approx(want, rel=1e-12)
    assert 85 < row["uncounted_replay_pct"] < 95
    assert row["flops"] > 0 and row["mfu_pct"] < 0.01


def test_json_of_replays_alone_says_why_the_mfu_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    """No FLOPs counted at all: an ``mfu`` row of none, its MFU null (unknown, not 0%),
    and the 93% of kernel time the replays ran (before, an empty table)."""
    row = _overall(capsys, str(REPLAYS_ONLY))
    assert row["uncounted_replay_pct"] == pytest.approx(uncounted_replays(polyprof.load(REPLAYS_ONLY)), rel=1e-12)
    assert row["uncounted_replay_pct"] > 90
    assert row["flops"] == 0 and row["mfu_pct"] is None and row["peak_flops_per_s"] is None


@pytest.mark.parametrize("name", ["torch_bf16_mm_h200.json.gz", "torch_compile_train_h200.json.gz"])
def test_json_share_is_zero_without_uncounted_replays(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No graphs (the bf16 products), or graphs captured in the trace (the train step,
    whose replays count their captured ops' FLOPs): 0, and the steps' rows none."""
    assert main(["summary", "--json", str(DATA / name)]) == 0
    records = json.loads(capsys.readouterr().out)["tables"]["mfu"]["records"]
    assert [r["uncounted_replay_pct"] for r in records if r["step"] == -1] == [0.0]
    assert all(r["uncounted_replay_pct"] is None for r in records if r["step"] != -1)


@pytest.mark.parametrize("which", ["no_capture", "replays_only"])
def test_html_report_shows_it_beside_the_mfu(which: str, no_capture: Path, tmp_path: Path) -> None:
    """The report's data holds the share and the MFU line's words, and its overview shows
    them in the model FLOPs utilisation entry (headless Chromium, where installed)."""
    path = no_capture if which == "no_capture" else REPLAYS_ONLY
    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    data = page_data(out)
    row = dict(zip(data["mfu"]["columns"], data["mfu"]["rows"][0]))
    share = uncounted_replays(build(polyprof.load(path)).trace)
    assert row["uncounted_replay_pct"] == pytest.approx(share, rel=1e-12)
    words = f"{share:.0f}% of kernel time ran in CUDA/HIP graph replays captured before the trace"
    assert data["mfu_uncounted"].startswith(words)
    if chromium() is None:
        return
    import cdp

    with cdp.report_page(out) as page:
        kv = page.eval("[].map.call(document.querySelectorAll('#overview-kv > *'), function (e) "
                       "{ return e.textContent; })")
        shown = dict(zip(kv[::2], kv[1::2]))["model FLOPs utilisation"]
    if which == "no_capture":
        assert shown.startswith(f"{row['mfu_pct']:.1f}% of ") and shown.endswith("; " + data["mfu_uncounted"])
    else:
        assert shown == "unknown: " + data["mfu_uncounted"]


def test_html_without_uncounted_replays_says_nothing_of_them(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(DATA / "torch_compile_train_h200.json.gz"), "-o", str(out)]) == 0
    data = page_data(out)
    assert dict(zip(data["mfu"]["columns"], data["mfu"]["rows"][0]))["uncounted_replay_pct"] == 0.0
    assert data["mfu_uncounted"] is None


def _replays(path: Path, mm: bool) -> Path:
    """STEPS steps of 100 µs, each an op (``aten::mm`` with its FLOPs, or ``aten::relu``
    without) whose kernel runs 10 µs, then a launch of a CUDA graph captured before the
    trace (3 kernels of 2 µs): 6 of every 16 µs of kernel time in uncounted replays."""
    ev: list[dict] = []
    t, corr = 1000.0, 1
    for s in range(STEPS):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 100, "tid": 100,
                   "ts": t, "dur": 100.0, "args": {}})
        args = {"Input Dims": [[512, 512], [512, 512]], "Input type": ["float", "float"]} if mm else {}
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm" if mm else "aten::relu", "pid": 100, "tid": 100,
                   "ts": t + 1, "dur": 20.0, "args": {"External id": corr, **args}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                   "ts": t + 5, "dur": 5.0, "args": {"correlation": corr, "External id": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm" if mm else "relu", "pid": 0, "tid": 7, "ts": t + 20,
                   "dur": 10.0, "args": {"correlation": corr, "stream": 7, "device": 0}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100,
                   "ts": t + 30, "dur": 5.0, "args": {"correlation": corr + 1}})
        ev += [{"ph": "X", "cat": "kernel", "name": f"G{j}", "pid": 0, "tid": 7, "ts": t + 40 + 4 * j, "dur": 2.0,
                "args": {"correlation": corr + 1, "stream": 7, "device": 0}} for j in range(3)]
        corr += 2
        t += 100.0
    ev += [{"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
           {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [H200], "traceEvents": ev}))
    return path


@pytest.mark.parametrize("mm", [True, False])
def test_a_stores_rank_summarised_by_windows_gives_the_whole_reads_share(
        mm: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A store's rank read whole and window by window: the same ``mfu`` table, its share
    the windows' uncounted replay time over their kernel time (37.5%); without model
    FLOPs (relu), a row of none per step under the whole row, MFU unknown (before: the
    rank merged from windows had no share, and without FLOPs no rows)."""
    store = polyprof.load_ranks([_replays(tmp_path / "rank0.json", mm)]).convert(tmp_path / "s", chunk_rows=20000)

    found: list = []

    def table() -> list[dict]:
        assert main(["summary", "--json", str(store)]) == 0
        doc = json.loads(capsys.readouterr().out)
        found.append(sorted((f["id"], f["suggestion"]) for f in doc["findings"]))  # (an event rule's title
        # is its worst window's: docs/store.md)
        return doc["tables"]["mfu"]["records"]

    whole = table()
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    seen: list = []
    real = stepwise.summarise
    monkeypatch.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    windowed = table()
    assert seen and len(seen[0].events) >= 2, "the windowed path ran, in two windows or more"
    assert whole[0]["step"] == -1 and whole[0]["uncounted_replay_pct"] == pytest.approx(37.5, rel=1e-12)
    assert (whole[0]["flops"] > 0) == mm and (whole[0]["mfu_pct"] is None) != mm
    assert len(windowed) == len(whole) == STEPS  # the whole row and every step but the first
    # the table-only rules read the merged rank, which has no events: the same findings and
    # advice as read whole (before: low_mfu, held back read whole as MFU + uncounted >= 30%,
    # was found with a CPU's advice)
    assert found[0] == found[1] and not any("On a CPU" in f[1] for f in found[1]), found
    for w, x in zip(windowed, whole):  # (each JSON value of the same type: 0.0 FLOPs, not 0, in both)
        assert w.keys() == x.keys() and all(type(w[k]) is type(x[k]) for k in x)
        assert all(w[k] == pytest.approx(x[k], rel=1e-9) if isinstance(x[k], float) else w[k] == x[k] for k in x)
