"""DeepEP's expert-parallel all-to-all kernels (``deep_ep::internode::dispatch``, and in
DeepSeek's own published traces ``dpsk::ep::internode::combine``...) are communication:
a DeepSeek-V3 training rank's 113 ms of them read as compute, its overlap table
"communication 0" and its collectives none (trace/categories.EP_NAMESPACES)."""

from __future__ import annotations

import json
from pathlib import Path

from polyprof.analyze.collectives import normalise_op
from polyprof.cli import main

NAMES = ["void deep_ep::internode::dispatch<false, 8, true, 8>(int4*, float*)",
         "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)",
         "void deep_ep::intranode::notify_dispatch(int const*, int*)"]


def test_deepep_kernels_are_an_all_to_all(tmp_path: Path, capsys) -> None:
    assert {normalise_op(n) for n in NAMES} == {"alltoall"}
    ev = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 23, "ts": 10 + 100 * i, "dur": 50,
           "args": {"device": 0, "stream": 23}} for i, n in enumerate(NAMES)]
    ev.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": 0, "dur": 300,
               "args": {"device": 0, "stream": 7}})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    assert main(["summary", str(path), "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    (row,) = tables["comm_comp_overlap"]["records"]
    assert (row["communication_ns"], row["compute_ns"], row["overlap_ns"]) == (150_000, 300_000, 150_000), row
    assert [(r["op"], r["count"]) for r in tables["collective_stats"]["records"]] == [("alltoall", 3)]
