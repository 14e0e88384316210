"""Run polyprof's conformance kit against this plugin: every clause must hold."""

from polyprof.collect.conformance import check

from polyprof_example_plugin import GcPausePlugin


def test_plugin_passes_the_conformance_kit():
    report = check("polyprof_example_plugin:GcPausePlugin")
    assert report.ok, [(r.id, r.status, r.reason) for r in report.results]


def test_plugin_records_gc_pauses():
    from polyprof.collect.session import Session

    with Session([GcPausePlugin()]) as s:
        GcPausePlugin.conformance_workload(0.05)
    names = set(s.trace.names())
    assert "gc gen0" in names, names
