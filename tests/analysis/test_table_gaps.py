"""Table.concat where a table lacks a column keeps the column's kind (counts int64,
flags bool: docs/analysis.md) with the missing value of that kind; Table.from_pandas
never keeps pandas' ``pd.NA``. Before, ints and bools became float64 with NaN and a
nullable text column printed ``<NA>``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from polyprof.analyze.table import Table, missing


def test_concat_keeps_ints_and_bools_where_a_table_lacks_the_column():
    a = Table.from_pandas(pd.DataFrame({"name": ["x", "y"], "n": [1, 2], "f": [0.5, 1.5]}))
    b = Table.from_pandas(pd.DataFrame({"name": ["z"], "g": [True]}))
    c = Table.concat([a, b])
    assert {k: c[k].dtype for k in c.columns} == {"name": object, "n": np.int64, "f": np.float64, "g": bool}
    assert c["n"].tolist() == [1, 2, -1] and c["g"].tolist() == [False, False, True]
    assert c["f"][:2].tolist() == [0.5, 1.5] and np.isnan(c["f"][2])
    assert c.to_pandas()["n"].dtype == np.int64


def test_missing_values_per_kind():
    assert missing(np.dtype(object), 2).tolist() == [None, None]
    assert missing(np.dtype(np.int32), 1).dtype == np.int32 and missing(np.dtype(np.int64), 1).tolist() == [-1]
    assert missing(np.dtype(bool), 1).tolist() == [False]
    assert np.isnat(missing(np.dtype("datetime64[ns]"), 1)).all()
    assert np.isnat(missing(np.dtype("timedelta64[ns]"), 1)).all()
    assert np.isnan(missing(np.dtype(np.float32), 1)).all()
    u = Table.concat([Table({"u": np.array([2 ** 63], np.uint64)}), Table({"x": [1]})])
    assert u["u"].dtype == np.float64 and np.isnan(u["u"][1])  # no unsigned value says "none"
    s = Table.concat([Table({"s": np.array(["ab"])}), Table({"x": [1]})])
    assert s["s"].tolist() == ["ab", None]


def test_concat_of_parts_that_all_have_the_column_is_unchanged():
    a, b = Table({"n": [1], "g": [True]}), Table({"n": [2.5], "g": [False]})
    c = Table.concat([a, b])
    assert c["n"].dtype == np.float64 and c["n"].tolist() == [1.0, 2.5] and c["g"].dtype == bool


def test_from_pandas_has_no_pd_na():
    d = Table.from_pandas(pd.DataFrame({
        "name": pd.array(["x", None], dtype="string"), "n": pd.array([1, None], dtype="Int64"),
        "s": pd.Series(["a", None]), "flag": pd.array([True, None], dtype="boolean"),
        "obj": pd.Series(["q", pd.NA], dtype=object), "num": pd.Series([1.0, np.nan], dtype=object)}))
    rows = d.rows()
    assert rows[0] == ("x", 1.0, "a", True, "q", 1.0)
    assert rows[1][0] is None and np.isnan(rows[1][1]) and rows[1][2] is None and rows[1][3] is None
    assert rows[1][4] is None and np.isnan(rows[1][5])  # a NaN in a plain object column stays
    assert "<NA>" not in repr(d)
    t = Table({"name": pd.Series(["x", None], dtype="string")})  # a Series given as a column
    assert t["name"].tolist() == ["x", None]
