"""The flow binding's lookup of each track's first slice must be np.searchsorted's answer."""

from __future__ import annotations

import numpy as np
import pytest

from polyprof.formats.kineto.flows import _first_of_track


@pytest.mark.parametrize("seed", range(8))
def test_first_of_track_is_searchsorted(seed):
    rng = np.random.default_rng(seed)
    dtype = (np.int32, np.int64)[seed % 2]
    t_s = np.sort(rng.integers(0, int(rng.integers(1, 60)), int(rng.integers(0, 5000)))).astype(dtype)
    q = rng.integers(0, 80, int(rng.integers(1, 3000)))  # tracks without slices, before and after all
    assert np.array_equal(_first_of_track(t_s, q), np.searchsorted(t_s, q.astype(dtype), "left"))


def test_first_of_track_sparse_ids_and_edges():
    t_s = np.array([0, 0, 3, 3, 3, 7], np.int32)
    assert _first_of_track(t_s, np.array([7, 0, 3, 1, 8])).tolist() == [5, 0, 2, 2, 6]
    big = np.array([1 << 40, 2, 0], np.int64)  # sparse ids: the binary search itself
    t64 = np.array([0, 2, 2, 1 << 40], np.int64)
    assert _first_of_track(t64, big).tolist() == np.searchsorted(t64, big, "left").tolist()
    assert _first_of_track(np.zeros(0, np.int64), np.array([0, 4])).tolist() == [0, 0]
    assert _first_of_track(t_s, np.zeros(0, np.int64)).tolist() == []
