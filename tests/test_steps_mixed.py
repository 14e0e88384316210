"""``polyprof.step()`` as a plain call and as ``with polyprof.step():`` in one program
(collect/steps.py): each loop gets one step per iteration where that can be decided from
what came before, and the trace says that both forms were used."""

import time

import numpy as np
import pytest

import polyprof
from polyprof.collect import steps as steps_mod

WORK_S = 0.02


def _step_durations_ms(pattern: str) -> tuple[list[float], list[object]]:
    def work() -> None:
        time.sleep(WORK_S)

    with polyprof.profile(plugins=["host"], output=None) as prof:
        for _ in range(3):
            if pattern == "block then call":
                with polyprof.step():
                    work()
                polyprof.step()
            elif pattern == "call inside block":
                with polyprof.step():
                    work()
                    polyprof.step()
                    work()
            elif pattern == "nested blocks":
                with polyprof.step():
                    with polyprof.step():
                        work()
            elif pattern == "blocks":
                with polyprof.step():
                    work()
            elif pattern == "calls":
                polyprof.step()
                work()
    tr = prof.trace
    rows = np.flatnonzero(tr.categories() == "step")
    rows = rows[np.argsort(tr.start_ns[rows])]
    # plain calls: step 0 is what ran before the first call (the set-up), not one of the
    # loop's; blocks: step 0 is the first block (the set-up is in no step)
    skip = 1 if pattern == "calls" else 0
    return (tr.dur_ns[rows][skip:] / 1e6).tolist(), list(tr.metadata.get("warnings", []))


@pytest.mark.parametrize("pattern, per_step, n", [("block then call", 1, 3), ("call inside block", 2, 3),
                                                  ("nested blocks", 1, 3), ("blocks", 1, 3), ("calls", 1, 2)])
def test_one_step_per_iteration(pattern, per_step, n):
    """Before, a loop of ``with polyprof.step(): ...`` then ``polyprof.step()`` recorded an
    empty step after every block (5 steps for 3 iterations: 20, 0, 20, 0, 20 ms), and a
    ``polyprof.step()`` inside a block split the block in two (6 steps)."""
    durations, warnings = _step_durations_ms(pattern)
    assert len(durations) == n, durations  # plain calls: the time after the last one is no step
    assert all(per_step * WORK_S * 1e3 * 0.9 < d < per_step * WORK_S * 1e3 + 50 for d in durations), durations
    mixed = any(steps_mod.MIXED in str(w) for w in warnings)
    assert mixed == (pattern in ("block then call", "call inside block")), warnings


def test_a_call_before_each_block_is_told():
    """A plain call *before* each block cannot be told from a plain-call loop when it is
    made: its first call begins step 1 (step 0 the set-up, as plain calls count), its
    first iteration keeps an empty step; the later ones are one step each, and the trace
    says both forms were used."""
    def work() -> None:
        time.sleep(WORK_S)

    with polyprof.profile(plugins=["host"], output=None) as prof:
        for _ in range(3):
            polyprof.step()
            with polyprof.step():
                work()
    tr = prof.trace
    rows = np.flatnonzero(tr.categories() == "step")
    dur = tr.dur_ns[rows[np.argsort(tr.start_ns[rows])]] / 1e6
    assert len(dur) == 5 and dur[1] < 5 and all(d > WORK_S * 1e3 * 0.9 for d in dur[2:]), dur
    assert any(steps_mod.MIXED in str(w) for w in tr.metadata["warnings"])
