"""Thread and process ids in the JSON exports are numbers a viewer holds exactly.

JAX's XSpaces carry hashed 64-bit thread ids (5306168164829452300 in the H200 file):
past 2**53 a JavaScript number (Perfetto's and Chrome's JSON import) or a pandas float
(HTA) rounds them, and two threads could become one. The Chrome and Kineto exports give
such a track the number they give a track without a usable id; names and events stay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import polyprof

FILE = Path(__file__).parent / "data" / "h200" / "jax_train_step_h200.xplane.pb"


@pytest.mark.parametrize("fmt", ["chrome", "kineto"])
def test_ids_past_2_53_are_renumbered(tmp_path, fmt):
    t = polyprof.load(FILE)
    assert max(tr.tid for tr in t.tracks) > 2 ** 53  # what the file holds
    out = tmp_path / f"x.{fmt}.json"
    polyprof.export(t, out, format=fmt)
    doc = json.loads(out.read_text())
    records = doc["traceEvents"] if isinstance(doc, dict) else doc
    ids = [r[k] for r in records for k in ("pid", "tid") if isinstance(r.get(k), int)]
    assert ids and max(ids) <= 2 ** 53 - 1
    threads = {(r["pid"], r["tid"]) for r in records
               if r.get("name") == "thread_name" and " (overlap " not in r["args"]["name"]}
    assert len(threads) == len(t.tracks)  # still one id per track (a Chrome export's overlap lanes aside)
    back = polyprof.load(out)
    assert back.n_events == t.n_events
