"""analyze/frames.py and analyze/table.py: the one-step table build types columns as
pandas' constructor types a list, the NumPy sort orders are exactly pandas'
``sort_values`` (pandas is the reference here, never in src/), and the Table API a
notebook user needs (selection, sorting, rows, repr, conversions)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest

from polyprof.analyze.frames import frame, order_asc, order_desc, ratio_pct, rows_frame
from polyprof.analyze.table import Table

COLUMNS = [
    ["a", "b", "c"], [1, 2, 3], [1.0, 2.5, -1.0], [1, 2.5, 3], [True, False, True], [1, None, 3],
    ["a", None, "c"], [np.int64(1), 2, 3], [np.float64(0.5), 1, np.nan], np.array(["x", "y", "z"], object),
    np.array([1, 2, 3]), np.array([1.0, np.nan, 3.0]), (3, 4, 5), [2 ** 63, 1, 2], [[1], [2], [3]],
    np.array([True, False, False]), [None, None, None], [np.float32(1.5), np.float32(2), np.float32(3)],
]


def _pandas_dtype(col) -> np.dtype:
    """The NumPy dtype of what pandas makes of ``col`` (its text and extension dtypes: object)."""
    dt = pd.Series(col).dtype
    return dt if isinstance(dt, np.dtype) else np.dtype(object)


def _same_value(a, b) -> bool:
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))  # noqa: E731
    return (missing(a) and missing(b)) or a == b


@pytest.mark.parametrize("col", COLUMNS, ids=lambda c: repr(c)[:24])
def test_frame_types_columns_as_the_pandas_constructor_does(col):
    t = frame({"c": col, "n": np.array([3, 1, 2])})
    assert isinstance(t, Table) and t.columns == ["c", "n"] and len(t) == 3
    assert t["c"].dtype == _pandas_dtype(col)
    want = pd.Series(col).tolist()
    assert all(_same_value(a, b) for a, b in zip(t["c"].tolist(), want)), (t["c"].tolist(), want)
    order = np.array([2, 0, 1])
    assert frame({"c": col, "n": np.array([3, 1, 2])}, order=order).equals(t.take(order))


def test_text_stays_numpy_object():
    t = rows_frame([("gpu", 1, 0.5), ("cpu", 2, 1.5)], ["plane", "n", "x"])
    assert t["plane"].dtype == object and t["n"].dtype == np.int64 and t["x"].dtype == np.float64
    df = t.to_pandas()
    assert df["plane"].dtype == object and list(df.columns) == ["plane", "n", "x"]
    assert isinstance(df.index, pd.RangeIndex) and df.columns.dtype == object


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        frame({"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError, match="1-d"):
        Table({"a": np.zeros((2, 2))})


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


def test_orders_match_sort_values_on_every_dtype_and_many_ties():
    """order_asc / order_desc on each dtype against pandas' own sort of a Series."""
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 7, 40, 300, 5000):
        text = np.array([f"k{i}" for i in rng.integers(0, 9, n)], object)
        gappy = text.copy()
        gappy[rng.random(n) < 0.2] = None
        for values in (rng.integers(0, 5, n), rng.integers(-3, 3, n).astype(np.uint8) if n else np.zeros(0, np.uint8),
                       rng.integers(0, 4, n).astype(np.float64), np.where(rng.random(n) < 0.2, np.nan, rng.random(n)),
                       rng.integers(0, 3, n).astype(np.int32), rng.integers(0, 3, n).astype(object),
                       rng.integers(0, 2, n).astype(bool), text, gappy,
                       rng.integers(0, 5, n).astype("datetime64[ns]")):
            s = pd.Series(values, dtype=values.dtype)
            # (times: stable only; pandas' quicksort of datetimes leaves ties otherwise)
            for stable, kind in ((True, "stable"), (False, "quicksort"))[: 1 if values.dtype.kind == "M" else 2]:
                assert order_desc(values, stable).tolist() == \
                    s.sort_values(ascending=False, kind=kind).index.tolist(), (values.dtype, n, kind)
                assert order_asc(values, stable).tolist() == s.sort_values(kind=kind).index.tolist()


# ------------------------------------------------------------------ the Table API
def _kernels() -> Table:
    return frame({"name": ["gemm", "relu", "copy/h2d", "relu2"], "count": [3, 10, 1, 10],
                  "total_ns": [9000, 1200, 500, np.nan], "share_pct": [84.1, 11.2, 4.7, np.nan]})


def test_reading_columns_rows_and_dicts():
    t = _kernels()
    assert t.columns == ["name", "count", "total_ns", "share_pct"] and t.shape == (4, 4) and len(t) == 4
    assert "count" in t and "nope" not in t and list(t) == t.columns
    assert t["count"].tolist() == [3, 10, 1, 10] and t.get("nope") is None
    assert t.rows()[0] == ("gemm", 3, 9000.0, 84.1)
    d = t.to_dicts()
    assert d[1] == {"name": "relu", "count": 10, "total_ns": 1200.0, "share_pct": 11.2}
    assert math.isnan(d[3]["total_ns"])
    with pytest.raises(KeyError, match="no column 'nope'; columns: name, count"):
        t["nope"]


def test_selection_and_sorting():
    t = _kernels()
    assert t[["total_ns", "name"]].columns == ["total_ns", "name"]
    assert t.select(["name"]).equals(t[["name"]])
    assert t.take(t["count"] > 2)["name"].tolist() == ["gemm", "relu", "relu2"]
    assert t[t["count"] > 2].equals(t.take(t["count"] > 2)) and t[np.array([1])]["name"].tolist() == ["relu"]
    assert t.take([3, 0])["name"].tolist() == ["relu2", "gemm"] and len(t.take([])) == 0
    assert t.head(2)["name"].tolist() == ["gemm", "relu"]
    assert t.sort_by("total_ns")["name"].tolist() == ["copy/h2d", "relu", "gemm", "relu2"]  # NaN last
    assert t.sort_by("total_ns", descending=True)["name"].tolist() == ["gemm", "relu", "copy/h2d", "relu2"]
    assert t.sort_by("count", descending=True)["name"].tolist() == ["relu", "relu2", "gemm", "copy/h2d"]  # ties kept
    assert t.sort_by("name")["name"].tolist() == sorted(t["name"].tolist())
    w = t.with_columns(mean_ns=t["total_ns"] / t["count"], count=t["count"] * 2)
    assert w.columns == [*t.columns, "mean_ns"] and w["count"].tolist() == [6, 20, 2, 20]
    assert t["count"].tolist() == [3, 10, 1, 10]  # the table itself is unchanged


def test_concat_matches_columns_by_name():
    a = frame({"name": ["x", "y"], "n": [1, 2]})
    b = frame({"n": [3], "extra": [0.5]})
    empty = frame({"name": np.zeros(0, object), "n": np.zeros(0, object)})
    c = Table.concat([a, empty, b])
    assert c.columns == ["name", "n", "extra"] and len(c) == 3
    assert c["name"].tolist() == ["x", "y", None] and c["n"].dtype == np.int64 and c["n"].tolist() == [1, 2, 3]
    assert c["extra"].dtype == np.float64 and np.isnan(c["extra"][:2]).all() and c["extra"][2] == 0.5
    assert len(Table.concat([])) == 0


def test_equals_and_pickle():
    t = _kernels()
    assert t.equals(pickle.loads(pickle.dumps(t)))  # NaN equal to NaN
    assert not t.equals(t.head(3)) and not t.equals(t.with_columns(count=t["count"] + 1))
    assert not t.equals(t.with_columns(count=t["count"].astype(np.float64)))


def test_repr_is_a_readable_table():
    t = _kernels()
    text = repr(t)
    lines = text.splitlines()
    assert lines[0] == "Table: 4 rows x 4 columns"
    assert lines[1].split() == ["name", "count", "total_ns", "share_pct"]
    assert lines[2].split() == ["gemm", "3", "9000", "84.1"] and lines[5].split() == ["relu2", "10", "nan", "nan"]
    long = frame({"i": np.arange(100), "s": ["x" * 100] * 100})
    shown = repr(long).splitlines()
    assert "... 85 more rows ..." in shown and len(shown) == 2 + 10 + 1 + 5
    assert max(map(len, shown)) < 60  # long text is cut
    assert repr(Table()) == "Table: 0 rows x 0 columns"


def test_to_pandas_and_back():
    t = _kernels()
    df = t.to_pandas()
    assert list(df.columns) == t.columns and df["name"].dtype == object and df["count"].dtype == np.int64
    assert df["name"].tolist() == t["name"].tolist() and df["total_ns"].isna().tolist() == [False] * 3 + [True]
    assert Table.from_pandas(df).equals(t)
    assert len(Table().to_pandas()) == 0


def test_to_arrow():
    pa = pytest.importorskip("pyarrow")
    t = _kernels()
    at = t.to_arrow()
    assert at.column_names == t.columns and at.num_rows == 4
    assert at.schema.field("name").type == pa.string() and at.schema.field("count").type == pa.int64()
    assert at.column("name").to_pylist() == t["name"].tolist()


def test_to_polars():
    pl = pytest.importorskip("polars")
    t = _kernels()
    df = t.to_polars()
    assert isinstance(df, pl.DataFrame) and df.columns == t.columns and df["count"].to_list() == [3, 10, 1, 10]


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
