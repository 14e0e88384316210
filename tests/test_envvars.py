"""One reader for the numbers in POLYPROF_* variables: each limit checks its text the
same way and its error names the variable, the text and the unit."""

from __future__ import annotations

import pytest

from polyprof import envvars
from polyprof.analyze import critical_path
from polyprof.errors import PolyprofError
from polyprof.formats import safety, sqlite_bounds
from polyprof.ranks import fits


@pytest.mark.parametrize("text", ["x", "nan", "inf", "-1", "0", "1e400"])
def test_a_bad_number_names_the_variable_and_unit(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("POLYPROF_SQLITE_SECONDS", text)
    with pytest.raises(PolyprofError, match=rf"POLYPROF_SQLITE_SECONDS='{text}': expected seconds, a number above 0"):
        sqlite_bounds.seconds()


def test_unset_or_blank_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLYPROF_X_TEST", raising=False)
    assert envvars.number("POLYPROF_X_TEST", 7.5, "seconds") == 7.5
    monkeypatch.setenv("POLYPROF_X_TEST", "  ")
    assert envvars.whole("POLYPROF_X_TEST", 3, "events") == 3
    monkeypatch.setenv("POLYPROF_X_TEST", " 2.5 ")
    assert envvars.number("POLYPROF_X_TEST", 7.5, "seconds") == 2.5


def test_zero_and_a_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", "0")
    assert fits.available_bytes() == 0
    monkeypatch.setenv("POLYPROF_MEMORY_AVAILABLE", str(2 ** 41))
    with pytest.raises(PolyprofError, match="expected MiB, a number from 0 to 1.09951e"):
        fits.available_bytes()
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", "0")
    with pytest.raises(PolyprofError, match="POLYPROF_MEMORY_BOUND='0': expected MiB, a number above 0"):
        fits.memory_bound()
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", "64")
    assert fits.memory_bound() == 64 << 20


def test_the_critical_path_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """0 lifts the limit; junk was taken silently for the default before."""
    monkeypatch.setenv("POLYPROF_CRITICAL_PATH_MAX_EVENTS", "0")
    assert critical_path._limit("default") is None
    monkeypatch.setenv("POLYPROF_CRITICAL_PATH_MAX_EVENTS", "1000")
    assert critical_path._limit("default") == 1000
    monkeypatch.setenv("POLYPROF_CRITICAL_PATH_MAX_EVENTS", "lots")
    with pytest.raises(PolyprofError, match="POLYPROF_CRITICAL_PATH_MAX_EVENTS='lots': expected events"):
        critical_path._limit("default")


def test_reader_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLYPROF_MAX_EVENTS", "1000")
    monkeypatch.setenv("POLYPROF_MAX_INFLATE_RATIO", "12.5")
    lim = safety.current()
    assert (lim.max_events, lim.max_inflate_ratio) == (1000, 12.5)
    assert isinstance(lim.max_events, int)
    monkeypatch.setenv("POLYPROF_MAX_EVENTS", "-5")  # taken before, and every read refused
    with pytest.raises(PolyprofError, match="POLYPROF_MAX_EVENTS='-5': expected events, a number above 0"):
        safety.current()
