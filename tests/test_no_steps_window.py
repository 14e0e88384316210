"""A trace without steps is analysed whole; where its device activity is a small part of
that span (a JAX program's compilation before its first kernel), the window's label
says where the device's part is and that ``--span device`` analyses it
(``analyze.window_words.device_extent_words``)."""

from __future__ import annotations

from pathlib import Path

import polyprof
from polyprof.analyze.window import AUTO, Window, select

PEERS = Path(__file__).parent / "data" / "peers" / "tracelens"


def test_a_late_device_is_said_in_the_label_of_a_trace_without_steps() -> None:
    """TraceLens's JAX XSpace: 9.73 s of trace, its GPU's 150 kernels in the last 13 ms."""
    trace = polyprof.load(PEERS / "jax_te_fused_attn_934987a2fc2f.xplane.pb")
    for window in (AUTO, None, Window()):
        label = select(trace, window).label
        assert label.startswith("whole trace (no steps; device activity only from 9.72 s to 9.73 s"), label
        assert "(13 ms, 0.1% of the span): --span device analyses that)" in label, label
    # the device span chosen: the label says so, not the hint
    assert select(trace, Window(span="device")).label == "whole trace (no steps; span: device)"


def test_a_device_busy_over_most_of_the_trace_gets_no_words() -> None:
    """TraceLens's other JAX XSpace: its eight GPUs work over most of its 165 ms."""
    trace = polyprof.load(PEERS / "jax_conv_minimal_08.xplane.pb")
    assert select(trace, AUTO).label == "whole trace (no steps)"
