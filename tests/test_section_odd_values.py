"""One odd value in a section's data never loses the host plugin's data (trace/stats.py
``_to_text``): an int beyond 64 bits, a dict key that is no string, an object inside a
list. Before, orjson refused them in collect (``TypeError: Integer exceeds 64-bit
range``), the host plugin failed, and every host event was lost from the trace."""

from __future__ import annotations

import json
from pathlib import Path

import polyprof
from polyprof.trace.stats import _to_text


class _Thing:
    def __str__(self) -> str:
        return "a thing"


def test_odd_section_values_keep_the_host_plugins_data(tmp_path: Path) -> None:
    out = tmp_path / "odd.polyprof"
    with polyprof.profile(plugins=["host"], output=str(out)):
        with polyprof.section("plain"):
            pass
        with polyprof.section("big", d={"k": 2**80}):
            pass
        with polyprof.section("keys", d={1: "one", 2: "two"}):
            pass
        with polyprof.section("thing", d=[_Thing(), 1]):
            pass
    t = polyprof.load(out)
    assert t.metadata["plugins"]["host"] == "ok", t.metadata["plugins"]
    df = t.to_pandas()
    assert {"plain", "big", "keys", "thing"} <= set(df["name"]), set(df["name"])
    d = dict(zip(df["name"], df["d"]))
    assert json.loads(d["big"]) == {"k": 2**80}
    assert json.loads(d["keys"]) == {"1": "one", "2": "two"}
    assert json.loads(d["thing"]) == ["a thing", 1]


def test_to_text_falls_back_to_the_standard_library_then_str() -> None:
    assert json.loads(_to_text({"k": 2**80})) == {"k": 2**80}
    assert json.loads(_to_text([_Thing()])) == ["a thing"]
    assert _to_text({(1, 2): 3}) == "{(1, 2): 3}"  # a key json refuses too: Python's text
    assert _to_text({"a": [1, 2]}) == '{"a":[1,2]}'  # orjson's, as before
