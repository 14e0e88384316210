"""The HTML report of several ranks: ranks side by side, alignment bounds, stragglers,
as a person sees the page in headless Chromium."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from polyprof.cli import main

from . import browser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rankmaker import make_ranks  # noqa: E402


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory, traces_dir):
    d = tmp_path_factory.mktemp("r3")
    make_ranks(traces_dir / "kineto" / "a100_nccl_rank0.json.gz", d, [0, 2_000_000, -1_000_000], {1: 300.0})
    return d


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_ranks_side_by_side_in_the_browser(three_ranks, tmp_path):
    out = tmp_path / "job.html"
    assert main(["report", str(three_ranks), "-o", str(out), "-j", "1"]) == 0
    dom, console = browser.dump_dom(out)
    assert "Uncaught" not in console, console
    card = dom[dom.index('id="ranks-card"'):dom.index('id="findings"')]
    assert "hidden" not in card[:60]  # the card is shown
    assert card.count("rank-0.json.gz") == 1 and card.count("rank-2.json.gz") == 1
    # alignment table: the offsets (what was added) with their bounds in µs
    assert re.search(r"-2\.00 ms</td><td>[\d.]+ µs", card) and re.search(r"1\.00 ms</td><td>[\d.]+ µs", card)
    assert "rank 1 is the straggler" in dom
    assert card.count("<svg") >= 1  # step time per rank chart
    assert "analysed window" in card and "first step skipped" in card
