"""The compiled field gather of decoded Kineto events (formats/kineto/_gather.c) against
its Python path: the same trace from every shared Kineto file either way, the same
columns on odd values (new, unhashable, out of range, other types), and a clear error
where it is misused."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from polyprof.formats import kineto
from polyprof.formats.kineto import gather, tokenized
from polyprof.formats.kineto.events import _Event
from test_kineto_differential import assert_same_trace

pytestmark = pytest.mark.skipif(gather.IMPLEMENTATION != "c",
                                reason="the _gather extension is not built (python setup.py build_ext --inplace)")


def test_every_shared_trace_reads_the_same_with_and_without_the_extension(kineto_files, monkeypatch):
    monkeypatch.setattr(tokenized, "_tokens", None)  # every slice decoded by msgspec: the gather's path
    for path in kineto_files:
        fast = kineto.load(path)
        with monkeypatch.context() as m:
            m.setattr(gather, "_gather", None)
            slow = kineto.load(path)
        assert_same_trace(fast, slow)


def _events(*fields: dict) -> list[_Event]:
    return [_Event(**f) for f in fields]


@pytest.mark.parametrize("values, table, dtype", [
    ([1, 2, 1, 1, 3], {1: 0, 2: 1, 3: 2}, np.int64),  # runs of one value
    (["a", "b", "a"], {"a": 7, "b": -3}, np.int32),
    ([1, 2, 9], {1: 0, 2: 1}, np.int64),  # a value not in the table
    ([[1], 2], {2: 0}, np.int64),  # unhashable
    ([1, 2], {1: 0, 2: 300}, np.int8),  # does not fit int8
    ([1, 2], {1: 0, 2: 2 ** 40}, np.int32),  # does not fit int32
    ([1, 2], {1: 0, 2: 2 ** 70}, np.int64),  # does not fit int64
    ([1, 2], {1: 0, 2: "x"}, np.int64),  # a code that is not an int
    ([1.0, True], {1: 5}, np.int64),  # equal keys of other types, as a dict lookup finds them
    ([], {}, np.int64),
])
def test_codes_as_the_python_path(values, table, dtype):
    evs = _events(*({"pid": v} for v in values))
    fast = gather.codes(evs, "pid", table, dtype)
    slow = gather.codes(evs, "pid", table, dtype, compiled=False)
    if slow is None:
        assert fast is None
    else:
        assert fast is not None and fast.dtype == slow.dtype and fast.tolist() == slow.tolist()
        fast[:] = 0  # a column the collector may write to


def test_values_as_the_python_path():
    raw = msgspec.Raw(b"12.5")
    evs = _events({"ts": raw, "name": "k"}, {"name": None}, {})
    for field in ("ts", "name", "args", "id"):
        assert gather.values(evs, field) == gather.values(evs, field, compiled=False)
    assert gather.values(evs, "ts")[0] is raw


def test_other_objects_take_the_python_path_or_fail_clearly():
    class Other:
        pid = 1

    evs = [_Event(pid=1), Other()]
    assert gather.codes(evs, "pid", {1: 0}, np.int64) is None
    with pytest.raises(TypeError, match="struct type"):
        gather.values(evs, "pid")
    with pytest.raises(TypeError, match="member descriptor"):
        gather._gather.codes([_Event(pid=1)], "pid", {1: 0}, 8)
    with pytest.raises(ValueError, match="itemsize"):
        gather._gather.codes([_Event(pid=1)], gather._FIELDS["pid"], {1: 0}, 2)
