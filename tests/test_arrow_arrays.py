"""trace/arrow_arrays.py builds the arrays pyarrow.array builds (from their buffers,
so that writing a journal or a trace does not import pandas)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from polyprof.trace import arrow_arrays as aa

CASES = [
    (np.array([3, -1, 2**40], np.int64), None),
    (np.array([1, 2, 3], np.int32), None),
    (np.array([0.5, np.nan, -2.0]), None),
    (np.array([True, False, True, True, False, False, True, False, True]), None),
    (np.array([], np.int64), None),
    (np.array([7, 8], np.int64), pa.int8()),
    ([1, None, 3], pa.int64()),
    ([None, None], pa.float64()),
    ([0.25, 1.0], pa.float64()),
    (["a", None, "é", "", "日本"], pa.string()),
    ([], pa.string()),
    ([None], pa.string()),
    ([b"\x00\xff", None, b""], pa.binary()),
]


@pytest.mark.parametrize("values,type", CASES)
def test_same_array_as_pyarrow(values, type):
    got = aa.array(values, type)
    want = pa.array(values, type)
    assert got.type == want.type
    assert got.null_count == want.null_count
    if pa.types.is_floating(got.type) and not got.null_count:  # NaN is not equal to itself
        assert np.array_equal(got.to_numpy(), want.to_numpy(), equal_nan=True)
    else:
        assert got.equals(want), (got, want)
    got.validate(full=True)


def test_table_of_numpy_columns():
    cols = {"a": np.arange(5, dtype=np.int64), "b": np.linspace(0, 1, 5), "c": np.zeros(5, np.int32)}
    assert aa.table(cols).equals(pa.table(cols))


def test_building_them_does_not_import_pandas():
    code = ("import sys, numpy as np, pyarrow as pa; from polyprof.trace import arrow_arrays as aa; "
            "aa.table({'a': np.arange(3)}); aa.array(['x', None], pa.string()); aa.array([1, None], pa.int64()); "
            "print('pandas' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
