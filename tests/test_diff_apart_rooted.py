"""The diff's "Ranks apart" line leaves rooted collectives out (broadcast, scatter,
reduce, gather): it reads the rank spending least in a collective as the last to
arrive, which holds where every rank waits for every other (an all-reduce) and not
where the ranks are bound one way (a broadcast's root sends and is done; in gloo's
broadcast a receiver may relay to another). Real 4-rank gloo jobs
(tests/data/traces/gloo_rooted): ``bcast``, where receiver rank 3 sleeps 30 ms before the
broadcast in steps 2-4 and rank 1 waits for it, and ``subgroup``, no late broadcast of
the world. Before, ``diff bcast subgroup`` said of gloo:broadcast "they waited for rank
2 in A": rank 2, which spent least in it, was the late one by that reading."""

from __future__ import annotations

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.diff_apart import measures_wait


def _job(traces_dir, run: str) -> list:
    return [polyprof.load(f) for f in sorted((traces_dir / "gloo_rooted").glob(f"{run}.rank*.pt.trace.json.gz"))]


def test_rooted_collectives_measure_no_wait():
    """Rooted collectives, by every name the diff gives them (a CPU backend's range, NCCL's
    kernel raw or by its role's name), are out; the others as before."""
    for table, name, kind in (("sections", "gloo:broadcast", ""), ("sections", "gloo:reduce", ""),
                              ("sections", "gloo:gather", ""), ("sections", "gloo:scatter", ""),
                              ("ops", "mpi:broadcast", ""),
                              ("kernels", "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                               "communication"),
                              ("kernels", "ncclKernel_Reduce_RING_LL_Sum_float(ncclWorkElem)", "communication"),
                              ("kernels", "nccl Broadcast kernel", "communication")):
        assert not measures_wait(table, name, kind), name
    for table, name, kind in (("sections", "gloo:all_reduce", ""), ("sections", "gloo:reduce_scatter", ""),
                              ("sections", "gloo:all_gather", ""), ("ops", "mpi:allreduce", ""),
                              ("kernels", "nccl AllReduce kernel", "communication"),
                              ("kernels", "jit_step/all-reduce.1", "communication")):
        assert measures_wait(table, name, kind), name


def test_a_late_receiver_of_a_broadcast_is_not_misnamed(traces_dir):
    """``bcast`` against ``subgroup``: no "Ranks apart" line names gloo:broadcast (it named
    rank 2 as the one the others waited for; rank 3 was late); the all-reduce's line stays."""
    d = diff(_job(traces_dir, "bcast"), _job(traces_dir, "subgroup"))
    apart = [line for line in d.verdict if line.startswith("Ranks apart")]
    assert not [line for line in apart if "gloo:broadcast" in line], apart
    assert [line for line in apart if "gloo:all_reduce" in line], d.verdict
