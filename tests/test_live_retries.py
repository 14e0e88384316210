"""``tests/live.py``: a check is tried on fresh recordings while it fails, three in all,
each made once and shared; a pass after a failure warns, three failures fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from live import TRIES, Recordings, checked


def _recordings(tmp_path: Path, made: list[Path]) -> Recordings:
    def make(d: Path) -> Path:
        made.append(d)
        (d / "r").write_text(str(len(made) - 1))
        return d / "r"

    return Recordings(make, tmp_path)


def test_a_pass_on_a_fresh_recording_warns_and_the_next_check_shares_them(tmp_path):
    made: list[Path] = []
    recs = _recordings(tmp_path, made)

    def second_only(path: Path) -> None:
        assert path.read_text() == "1", f"recording {path.read_text()} is disturbed"

    with pytest.warns(UserWarning, match=r"after: recording 0: recording 0 is disturbed"):
        checked(recs, second_only)
    checked(recs, lambda path: None)  # the first recording again, not a new one
    assert [d.name for d in made] == ["try0", "try1"]


def test_every_try_failing_fails_with_each_message(tmp_path):
    made: list[Path] = []

    def never(path: Path) -> None:
        raise AssertionError(f"bad {path.read_text()}")

    with pytest.raises(AssertionError, match=f"all {TRIES} recordings: recording 0: bad 0; recording 1: bad 1; "):
        checked(_recordings(tmp_path, made), never)
    assert len(made) == TRIES
