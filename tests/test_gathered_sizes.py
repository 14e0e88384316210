"""A gloo all-gather sized as NCCL's: the gathered bytes, not its shard.

gloo's ``gloo:all_gather`` range records its own input (the shard: ``[[131328]]``);
the ``c10d::_allgather_base_`` that posted it lists the output first (``[[262656],
[131328], ...]``). NCCL's rows take the larger of input and output, so before a gloo
job's all-gathers were half (1/n) of a NCCL job's, and busbw n times too low. Real 2-rank
FSDP2 job on gloo, recorded by torch.profiler: tests/data/traces/gloo_fsdp2 (its README):
each layer's parameters all-gathered (1 MiB, 514 KiB, 20 KiB: the sizes its gradients'
all-reduces, gloo's reduce-scatter, have whole)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.collectives import DTYPE_BYTES, collective_table
from polyprof.analyze.frames import column
from polyprof.analyze.gathered_sizes import _posted

FSDP = Path(__file__).parent / "data" / "traces" / "gloo_fsdp2"


def _sizes(t, op: str) -> list[int]:
    keep = np.asarray(column(t, "op"), object) == op
    return sorted(set(np.asarray(column(t, "bytes"), np.int64)[keep].tolist()))


def test_a_gloo_all_gather_has_the_gathered_size():
    for r in (0, 1):
        t = collective_table(polyprof.load(FSDP / f"rank{r}.pt.trace.json.gz"))
        # 262656, 131584, 5130 floats gathered (the shards: 131328, 65792, 2565)
        assert _sizes(t, "allgather") == [20520, 526336, 1050624] == _sizes(t, "allreduce"), (r, _sizes(t, "allgather"))


def test_sized_from_the_op_that_posted_it():
    """Each all-gather paired with its ``c10d::_allgather_base_`` (the k-th with the
    k-th), its largest tensor: not the shard times a group size the trace may not tell."""
    trace = polyprof.load(FSDP / "rank0.pt.trace.json.gz")
    t = collective_table(trace)
    gathers = np.asarray(column(t, "op"), object) == "allgather"
    posted = _posted(trace, np.asarray(column(t, "start_ns"), np.int64)[gathers], DTYPE_BYTES)
    assert len(posted) == 24 and (posted == np.asarray(column(t, "bytes"), np.int64)[gathers]).all(), posted
