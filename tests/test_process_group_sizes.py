"""A collective whose args give no ``Group size`` (gloo's ``gloo:all_reduce`` ranges) takes
its group's size from the trace's ``distributedInfo`` (``analyze/process_groups.py``).
Before, it was a group of 1, so its bus bandwidth was the algorithm bandwidth: on a real
gloo rank of a 300-rank job (``cpu_only_rank34``, every listed group 300 ranks) half of
what the nccl-tests factor 2(n-1)/n gives."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.collectives import collective_stats, collective_table
from polyprof.analyze.frames import column

PATH = Path(__file__).parent / "data" / "traces" / "kineto" / "cpu_only_rank34.json.gz"


def test_gloo_ranges_take_the_group_size_of_distributed_info() -> None:
    info = json.loads(gzip.decompress(PATH.read_bytes()))["distributedInfo"]
    assert {c["pg_size"] for c in info["pg_config"]} == {300}
    t = polyprof.load(PATH)
    table = collective_table(t)
    assert set(np.asarray(column(table, "group_size")).tolist()) == {300}
    stats = collective_stats({34: table})
    algbw = np.asarray(column(stats, "algbw_gbps"), np.float64)
    busbw = np.asarray(column(stats, "busbw_gbps"), np.float64)
    assert len(busbw) and np.allclose(busbw, algbw * 2 * 299 / 300)


def test_a_named_group_takes_its_own_size_and_an_unknown_one_none(tmp_path: Path) -> None:
    from polyprof.analyze.process_groups import known_group_sizes

    info = {"rank": 0, "world_size": 8, "pg_config": [{"pg_name": "0", "pg_size": 8}, {"pg_name": "3", "pg_size": 2}]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"distributedInfo": info, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]}))
    t = polyprof.load(p)
    group = np.array([4, 0, 0, 0], np.int64)
    pg = np.array(["0", "3", "7", None], object)
    # its own size kept; group "3": 2; "7" is not listed: unknown; unnamed, the groups'
    # sizes differ: unknown
    assert known_group_sizes(t, group, pg).tolist() == [4, 2, 0, 0]
    info2 = {"rank": 0, "world_size": 8}
    p.write_text(json.dumps({"distributedInfo": info2, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]}))
    assert known_group_sizes(polyprof.load(p), group, pg).tolist() == [4, 0, 0, 8]  # no groups listed: the world
