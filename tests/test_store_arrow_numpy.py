"""A store read and written with less memory (issue 27 item 5): trace/arrow_numpy.py's
NumPy values and validity of a stored column, read from its buffers, equal pyarrow's
``to_numpy`` (the path that imports pandas), sliced and chunked columns and nulls
included; ``summary STORE`` runs without importing pandas; only text columns are
dictionary-encoded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import polyprof
from polyprof.trace.arrow_numpy import valid, values

V100 = Path(__file__).resolve().parent / "data/traces/kineto/v100_ns_resolution_rank0.json.gz"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return polyprof.load_ranks([V100]).convert(tmp_path_factory.mktemp("s") / "s", chunk_rows=20000)


def test_values_and_validity_equal_to_numpy(store):
    path = next(store.rglob("events.parquet"))
    table = pq.ParquetFile(path).read(use_threads=False)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 2  # chunks: one per row group
    checked = 0
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type) or pa.types.is_string(col.type):
            continue
        for c in (col, col.slice(1234, 30000), col.chunk(0).slice(7, 500)):
            assert np.array_equal(valid(c), c.is_valid().to_numpy(zero_copy_only=False)), name
            present = c.drop_null()
            got, want = values(present), present.to_numpy()
            assert got.dtype == want.dtype and np.array_equal(got, want), name
            checked += 1
    assert checked > 30
    flags = pa.chunked_array([pa.array([True, False, None, True]), pa.array([False, True])])
    assert values(flags.drop_null()).tolist() == [True, False, True, False, True]
    assert valid(flags).tolist() == [True, True, False, True, True, True]
    assert values(pa.chunked_array([], pa.int64())).dtype == np.int64


def test_summary_of_a_store_does_not_import_pandas(store):
    code = ("import sys; from polyprof.cli import main; main(['summary', sys.argv[1], '--json']); "
            "print('pandas' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True)
    assert out.stderr.strip().splitlines()[-1] == "False", out.stderr
    assert '"tables"' in out.stdout


def test_only_text_columns_are_dictionary_encoded(store):
    """Number columns are written plain (a dictionary of every start time only grows the
    file and the writer's peak: issue 27 item 5); text columns keep their dictionary."""
    meta = pq.ParquetFile(next(store.rglob("events.parquet"))).metadata
    group = meta.row_group(0)
    encoded = {group.column(i).path_in_schema: group.column(i).has_dictionary_page for i in range(group.num_columns)}
    assert encoded["name"] and encoded["category"] and encoded["track"]
    assert not any(encoded[c] for c in ("start_ns", "dur_ns", "end_ns", "input_row", "track_id", "name_id"))
    kinds = {f.name: f.physical_type for f in meta.schema}
    assert any(kinds[c] == "BYTE_ARRAY" and encoded[c] for c in encoded if c not in ("name", "category", "track", "plane"))
