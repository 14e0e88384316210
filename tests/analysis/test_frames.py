"""analyze/frames.py: the one-step frame build and the NumPy sort orders give exactly
what pandas' own constructor and ``sort_values`` give (pandas is the reference)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from polyprof.analyze.frames import _general, frame, order_asc, order_desc, ratio_pct, rows_frame

COLUMNS = [
    ["a", "b", "c"], [1, 2, 3], [1.0, 2.5, -1.0], [1, 2.5, 3], [True, False, True], [1, None, 3],
    ["a", None, "c"], [np.int64(1), 2, 3], [np.float64(0.5), 1, np.nan], np.array(["x", "y", "z"], object),
    np.array([1, 2, 3]), np.array([1.0, np.nan, 3.0]), (3, 4, 5), [2 ** 63, 1, 2], [[1], [2], [3]],
    np.array([True, False, False]),
]


@pytest.mark.parametrize("col", COLUMNS, ids=lambda c: repr(c)[:24])
def test_frame_types_columns_as_the_pandas_constructor_does(col):
    cols = {"c": col, "n": np.array([3, 1, 2])}
    want = _general(cols, None)
    got = frame(cols)
    pd.testing.assert_frame_equal(got, want)
    assert got.columns.dtype == object and isinstance(got.index, pd.RangeIndex)
    order = np.array([2, 0, 1])
    pd.testing.assert_frame_equal(frame(cols, order=order), want.iloc[order].reset_index(drop=True))
    idx = ["p", "q", "r"]
    pd.testing.assert_frame_equal(frame(cols, index=idx, order=order), _general(cols, pd.Index(idx, dtype=object))
                                  .iloc[order])


def test_text_stays_numpy_object_not_arrow():
    df = rows_frame([("gpu", 1, 0.5), ("cpu", 2, 1.5)], ["plane", "n", "x"])
    assert df["plane"].dtype == object and df["n"].dtype == np.int64 and df["x"].dtype == np.float64


def test_orders_match_sort_values_ties_and_nan_included():
    rng = np.random.default_rng(3)
    for n in range(0, 70):
        ints = rng.integers(0, 4, n)
        floats = np.where(rng.random(n) < 0.2, np.nan, rng.integers(0, 4, n).astype(float))
        for vals in (ints, floats):
            df = pd.DataFrame({"v": vals})
            for stable in (True, False):
                kw = {"kind": "stable"} if stable else {}
                assert np.array_equal(df.sort_values("v", ascending=False, **kw).index, order_desc(vals, stable))
                assert np.array_equal(df.sort_values("v", **kw).index, order_asc(vals, stable))


def test_ratio_pct_is_nan_where_the_denominator_is_not_positive():
    got = ratio_pct(np.array([1, 2, 3]), np.array([4, 0, -1]))
    want = 100.0 * pd.Series([1, 2, 3]) / pd.Series([4, 0, -1]).where(pd.Series([4, 0, -1]) > 0)
    np.testing.assert_array_equal(got, want.to_numpy())


def test_orders_match_nargsort_on_every_dtype_and_many_ties():
    """The NumPy path of order_asc / order_desc against pandas' nargsort it stands in for."""
    from pandas.core.sorting import nargsort

    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 7, 40, 300, 5000):
        for values in (rng.integers(0, 5, n), rng.integers(-3, 3, n).astype(np.uint8) if n else np.zeros(0, np.uint8),
                       rng.integers(0, 4, n).astype(np.float64), np.where(rng.random(n) < 0.2, np.nan, rng.random(n)),
                       rng.integers(0, 3, n).astype(np.int32), rng.integers(0, 3, n).astype(object),
                       rng.integers(0, 2, n).astype(bool)):
            for stable, kind in ((True, "stable"), (False, "quicksort")):
                assert order_desc(values, stable).tolist() == nargsort(values, kind=kind, ascending=False).tolist()
                assert order_asc(values, stable).tolist() == nargsort(values, kind=kind).tolist()


def test_tables_share_their_label_index_and_it_cannot_be_changed():
    a = frame({"x": np.arange(3), "y": np.arange(3.0)})
    b = frame({"x": np.arange(2), "y": np.arange(2.0)})
    assert list(a.columns) == ["x", "y"] and a.columns.dtype == object and a.columns.equals(b.columns)
    with pytest.raises(TypeError):
        a.columns[0] = "z"  # an Index is immutable, so sharing one is safe
    with pytest.raises(ValueError):
        a.columns.values[0] = "z"
    b.columns.name = "mine"
    b.columns = ["p", "q"]
    assert list(a.columns) == ["x", "y"] and a.columns.name is None


def test_table_labels_are_the_index_the_constructor_makes():
    from polyprof.analyze.frames import _labels

    for names in (("a", "b"), ("name", "count", "total_ns"), (), ("x",), ("dup", "dup")):
        got, want = _labels(names), pd.Index(list(names), dtype=object)
        assert type(got) is type(want) and got.dtype == want.dtype == object and got.equals(want), names
        assert got.is_unique == want.is_unique and got.inferred_type == want.inferred_type
        assert list(frame({n: np.arange(2) for n in names}).columns) == list(dict.fromkeys(names))


def test_factorize_is_pandas_factorize():
    from polyprof.analyze.frames import factorize
    from polyprof.trace.factorize import SMALL as _SMALL

    rng = np.random.default_rng(5)
    words = np.array(["hipLaunchKernel", "cudaLaunchKernel", "/device:GPU:0", "", "é", "x" * 300], object)
    cases = [words[rng.integers(0, len(words), n)] for n in (0, 1, 5, 200, _SMALL, _SMALL + 1)]
    cases += [np.array(["a", None, "b", "a"], object), np.array(["a", np.nan, "a"], object),
              np.array([3, 1, 3], object), np.array([2, 2, 7], np.int64)]
    for values in cases:
        codes, uniq = factorize(values)
        want_codes, want_uniq = pd.factorize(values)
        assert codes.dtype == want_codes.dtype and codes.tolist() == want_codes.tolist(), values[:5]
        assert isinstance(uniq, np.ndarray) and uniq.tolist() == list(want_uniq), values[:5]
