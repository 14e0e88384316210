"""The schema's records (Source, Plane, Track, Trace, Finding, Report) write their own
__init__ and take __repr__ and __eq__ from trace.model.Record (@dataclass would compile its
generated ones at every start): each is held here to the class @dataclass makes of the
same fields."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from polyprof.analyze.finding import Finding
from polyprof.report.tables import Report
from polyprof.trace.core import Trace
from polyprof.trace.model import Plane, Source, Track

RECORDS = [Source, Plane, Track, Trace, Finding, Report]


def _reference(cls: type) -> type:
    """The class @dataclass generates from ``cls``'s fields (and its __post_init__)."""
    specs = []
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            specs.append((f.name, f.type, dataclasses.field(default_factory=f.default_factory)))
        elif f.default is not dataclasses.MISSING:
            specs.append((f.name, f.type, dataclasses.field(default=f.default)))
        else:
            specs.append((f.name, f.type))
    ns = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    return dataclasses.make_dataclass(cls.__name__, specs, namespace=ns)


def _args(cls: type) -> dict[str, object]:
    """A value for every field without a default (and for one with a factory)."""
    trace = Trace()
    given: dict[type, dict[str, object]] = {
        Source: {"id": 3, "clock": {"mono_ns": 1}},
        Plane: {"id": 1, "name": "/device:GPU:0", "properties": {"a": 1}},
        Track: {"id": 2, "plane": 1, "name": "Stream #7", "properties": {"b": [1]}},
        Trace: {"strings": ["x"], "metadata": {"k": "v"}},
        Finding: {"id": "host_bound", "title": "t", "severity": "high", "plane": "p", "evidence": {"e": 1},
                  "events": [{"row": 1}]},
        Report: {"trace": trace, "tables": {}, "findings": [], "overview": {"o": 1}},
    }
    return given[cls]


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_record_methods_as_dataclass_generates(cls):
    ref = _reference(cls)
    assert dataclasses.is_dataclass(cls)
    mine, theirs = inspect.signature(cls.__init__).parameters, inspect.signature(ref.__init__).parameters
    assert [(p.name, p.kind, repr(p.default)) for p in mine.values()] == \
        [(p.name, p.kind, repr(p.default)) for p in theirs.values()]
    assert cls.__match_args__ == ref.__match_args__
    assert cls.__hash__ is None
    kw = _args(cls)
    a, b = cls(**kw), ref(**kw)
    if cls is not Trace:  # Trace has its own short __repr__
        assert repr(a) == repr(b).replace(ref.__qualname__, cls.__qualname__, 1)
    # every field as the generated __init__ leaves it (factories called, one object each)
    for f in dataclasses.fields(cls):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, dict) and x and all(isinstance(v, np.ndarray) for v in x.values()):
            assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        elif f.name == "stats":
            assert type(x) is type(y) and len(x) == len(y)
        else:
            assert x == y, f.name
    fresh = cls(**kw)
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING and f.name not in kw:
            assert getattr(fresh, f.name) is not getattr(a, f.name)  # a new object per instance
    # None given where a factory is the default is kept, as the generated __init__ keeps it
    factory = [f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING
               and f.name not in ("stats", "sources")]  # (__post_init__ replaces those)
    if factory:
        assert getattr(cls(**{**kw, factory[0]: None}), factory[0]) is None


@pytest.mark.parametrize("cls", [Source, Plane, Track, Finding], ids=lambda c: c.__name__)
def test_record_equality_replace_asdict(cls):
    kw = _args(cls)
    a = cls(**kw)
    assert a == cls(**kw) and not a != cls(**kw)
    first = dataclasses.fields(cls)[0].name
    other = dataclasses.replace(a, **{first: 99})
    assert other != a and getattr(other, first) == 99
    assert a.__eq__(object()) is NotImplemented
    assert dataclasses.asdict(a) == dataclasses.asdict(_reference(cls)(**kw))
    with pytest.raises(TypeError):
        hash(a)
