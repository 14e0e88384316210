"""The trace's warnings and plugin errors survive the Chrome JSON, Kineto and Perfetto
exports: ``polyprof run -o t.json.gz`` (or ``.pt.trace.json``, ``.pftrace``) of a session
whose host plugin dropped sections wrote no warning, so ``polyprof summary`` of the file
hid the lost data that the ``.polyprof`` archive's summary tells of. The exports write
them (Chrome: ``otherData``; Kineto: its ``polyprof`` key; Perfetto: Chrome metadata
entries) and polyprof's readers restore them (formats/chrome.py: ``notes``)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time

import pytest

import polyprof
from polyprof.formats import registry
from polyprof.plugins.host import HostPlugin
from polyprof.trace import metadata_keys as mkeys

_EXPORTS = ("t.json.gz", "t.pt.trace.json", "t.pftrace")
_DROPPED = "the 5 oldest sections were dropped"


@pytest.fixture(scope="module")
def recorded():
    """A real session whose host plugin keeps 5 of its 10 sections (a warning) and is
    listed twice (a plugin error: started once)."""
    host = HostPlugin(max_events=5)
    with polyprof.profile(plugins=[host, host]) as prof:
        for _ in range(10):
            with polyprof.section("work"):
                time.sleep(0.001)
            polyprof.step()
    meta = prof.trace.metadata
    assert any(_DROPPED in w for w in mkeys.warning_texts(meta)), meta.get(mkeys.WARNINGS)
    assert meta[mkeys.PLUGIN_ERRORS], meta
    return prof.trace


@pytest.mark.parametrize("name", _EXPORTS)
def test_export_keeps_warnings_and_plugin_errors(recorded, tmp_path, name):
    path = registry.write(recorded, tmp_path / name)
    back = polyprof.load(path)
    said = mkeys.warning_texts(back.metadata)
    want = mkeys.warning_texts(recorded.metadata)
    assert said[:len(want)] == want, said  # the recording's first, as it had them
    assert back.metadata[mkeys.PLUGIN_ERRORS] == recorded.metadata[mkeys.PLUGIN_ERRORS]
    # held once: not again in the verbatim copy of the file's own key
    for key in ("otherData", "polyprof"):
        assert mkeys.WARNINGS not in (back.metadata.get(key) or {}), back.metadata[key]
    # exported again from what was read: the same, not doubled
    again = polyprof.load(registry.write(back, tmp_path / f"again.{name}"))
    assert mkeys.warning_texts(again.metadata)[:len(said)] == said
    assert len(again.metadata[mkeys.PLUGIN_ERRORS]) == len(recorded.metadata[mkeys.PLUGIN_ERRORS])


def test_chrome_export_keeps_them_in_other_data(recorded, tmp_path):
    """Where the Chrome export writes them: ``otherData``, which chrome://tracing shows."""
    doc = json.loads(gzip.open(registry.write(recorded, tmp_path / "t.json.gz")).read())
    assert any(_DROPPED in str(w) for w in doc["otherData"][mkeys.WARNINGS])
    assert doc["otherData"][mkeys.PLUGIN_ERRORS] == recorded.metadata[mkeys.PLUGIN_ERRORS]


_PROGRAM = """
import polyprof, time
for i in range(10):
    with polyprof.section("work"):
        time.sleep(0.001)
    polyprof.step()
"""


@pytest.mark.parametrize("name", _EXPORTS)
def test_run_output_summary_tells_of_dropped_sections(tmp_path, name):
    """The auditor's repro: ``polyprof run -o NAME --plugin-options '{"host": {"max_events": 5}}'``,
    then ``polyprof summary NAME`` says the sections were dropped, as for ``-o t.polyprof``."""
    (tmp_path / "me.py").write_text(_PROGRAM)
    run = subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", name, "--plugin-options",
                          '{"host": {"max_events": 5}}', "me.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    summary = subprocess.run([sys.executable, "-m", "polyprof", "summary", name], cwd=tmp_path,
                             capture_output=True, text=True, timeout=180)
    assert summary.returncode == 0, summary.stderr
    assert "dropped" in summary.stdout + summary.stderr, summary.stdout
