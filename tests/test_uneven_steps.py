"""A job whose ranks share no collective (tests/data/traces/dask_uneven: two Dask workers,
worker 1 sleeping 40 ms a step in a ``slow_io`` section): the straggler finding reads the
waits at collectives and said nothing; the job's steps were 5-6x apart with only the
low "could not be aligned" finding."""

from __future__ import annotations

from pathlib import Path

import polyprof
from polyprof.analyze.frames import frame
from polyprof.ranks.uneven_steps import uneven_steps

JOB = Path(__file__).parent / "data" / "traces" / "dask_uneven"


def test_the_slow_worker_is_named() -> None:
    rep = polyprof.load_ranks(JOB).analyze("serial", progress=None)
    (f,) = [f for f in rep.findings if f.id == "uneven_steps"]
    assert f.evidence["rank"] == 1 and f.severity == "medium"
    assert f.evidence["step_median_ns"] - f.evidence["others_median_ns"] > 35e6  # the 40 ms sleep, a step
    assert f.title.startswith("rank 1's steps take ") and "no collective ties the ranks" in f.title


def _overview(medians: list[float], collectives: int = 0) -> object:
    return frame({"rank": list(range(len(medians))), "steps": [5] * len(medians), "step_median_ns": medians,
                  "collectives": [collectives] * len(medians)})


def test_only_without_collectives_and_beyond_noise() -> None:
    assert uneven_steps(_overview([10e6, 30e6]), [])
    assert not uneven_steps(_overview([10e6, 30e6], collectives=4), [])  # the straggler finding's
    assert not uneven_steps(_overview([10e6, 13e6]), [])  # 1.3x: not uneven
    assert not uneven_steps(_overview([100e3, 900e3]), [])  # 9x, but 0.8 ms: host noise
