"""A store is never lost to a convert that fails, and a damaged store is refused with one
line naming the file and what is wrong, by every command that reads it (docs/store.md,
docs/reliability.md).

Before: ``convert --overwrite`` removed the old store's ranks before reading any input,
so a bad input (or the store given as its own input) left nothing at ``-o``; ``sql`` on a
store with a damaged Parquet file, and summary/report/export/critical-path on a manifest
whose ``events`` was not a number, ended in "internal error"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import OutputError, TraceFormatError
from polyprof.store import Store, writer
from polyprof.store.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[1]
GLOO = [ROOT / "tests/data/traces/gloo/gloo_rank0.json.gz", ROOT / "tests/data/traces/gloo/gloo_rank1.json.gz"]


def cli(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def one_error(r: subprocess.CompletedProcess) -> str:
    """The single ``polyprof: error:`` line a failed command printed (and nothing else)."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("polyprof: error: "), r.stderr
    assert "internal error" not in lines[0], lines[0]
    return lines[0]


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.polyprof-"))


@pytest.fixture()
def store(tmp_path) -> Path:
    return polyprof.load_ranks(GLOO).convert(tmp_path / "st")


@pytest.mark.parametrize("case", ["the store itself", "a rank of the store", "bad JSON"])
def test_a_failed_overwrite_keeps_the_old_store(store, tmp_path, case):
    """The old store is byte for byte as it was, no work folder is left, one line says why."""
    before = files_of(store)
    if case == "bad JSON":
        bad = tmp_path / "bad.json"
        bad.write_text('{"traceEvents":[{"ph":"X"')
        line = one_error(cli("convert", GLOO[0], bad, "-o", store, "--overwrite"))
        assert "bad.json: invalid JSON" in line
    else:
        given = store if case == "the store itself" else store / "rank=0"
        line = one_error(cli("convert", given, "-o", store, "--overwrite"))
        assert f"{given}: the input is" in line and "(-o)" in line and "another -o" in line
    assert files_of(store) == before
    assert Store(store).ranks == [0, 1] and leftovers(store) == []


def test_a_swap_that_fails_puts_the_old_store_back(store, monkeypatch):
    """The last step fails (the new store cannot be renamed in): the old one is renamed back."""
    before = files_of(store)
    real = os.rename

    def rename(src, dst):
        if Path(src).name.endswith(".polyprof-new"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(writer.os, "rename", rename)
    with pytest.raises(OutputError, match=r"st: the new store could not be renamed into place \(No space left"):
        polyprof.load_ranks(GLOO[:1]).convert(store, overwrite=True)
    assert files_of(store) == before and leftovers(store) == []


def test_an_overwrite_replaces_the_store_through_a_link(store, tmp_path):
    """A successful overwrite: the new ranks in place, the old store gone, nothing beside it;
    an -o that is a symlink stays one, to the new store."""
    link = tmp_path / "link"
    link.symlink_to(store.name)
    polyprof.load_ranks(GLOO[1:]).convert(link, overwrite=True)
    assert link.is_symlink() and Store(store).ranks == [1] and Store(link).ranks == [1]
    assert read_manifest(store)["ranks"][0]["label"] == "gloo_rank1.json.gz"
    assert leftovers(store) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["link", "st"]


COMMANDS = {"sql": ["sql", "{s}", "select count(*) from planes"], "summary": ["summary", "{s}"],
            "report": ["report", "{s}", "-o", "{s}.html"], "export": ["export", "{s}", "-f", "chrome", "-o", "{s}.json"],
            "critical-path": ["critical-path", "{s}"]}


def run(command: str, store: Path) -> str:
    return one_error(cli(*(a.format(s=store) for a in COMMANDS[command])))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_truncated_parquet_file_is_named(store, command):
    f = store / "rank=1" / "events.parquet"
    f.write_bytes(f.read_bytes()[:3000])
    line = run(command, store)
    assert f"{f}: damaged store file" in line


def test_a_damaged_footer_duckdb_does_not_name_is_found(store):
    """DuckDB's error for a damaged footer names no file: the one it cannot read is found."""
    f = store / "rank=0" / "flows.parquet"
    b = bytearray(f.read_bytes())
    start = len(b) - 8 - int.from_bytes(b[-8:-4], "little")
    b[start + 20:start + 36] = b"\xff" * 16
    f.write_bytes(bytes(b))
    assert f"{f}: damaged store file (" in run("sql", store)


@pytest.mark.parametrize("value", [[1], "/etc"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_manifest_events_field_of_another_type_is_named(store, command, value):
    m = json.loads((store / "manifest.json").read_text())
    m["ranks"][0]["events"] = value
    (store / "manifest.json").write_text(json.dumps(m))
    line = run(command, store)
    assert f"{store / 'manifest.json'}: damaged store: the manifest's ranks[0].events is {value!r}, not a count" in line


@pytest.mark.parametrize("field, value, says", [
    ("events", -5, "ranks[1].events is -5, not a count"), ("events", True, "ranks[1].events is True"),
    ("events", 2**63, "ranks[1].events is 9223372036854775808, not a count"),
    ("rank", True, "ranks[1].rank is True, not an integer"), ("rank", "1", "ranks[1].rank is '1', not an integer"),
    ("label", 5, "ranks[1].label is 5, not text"), ("rank_from", None, "ranks[1].rank_from is None, not text"),
    ("span_ns", ["a", "b"], "ranks[1].span_ns is ['a', 'b'], not [start, end]"),
    ("sources", "x", "ranks[1].sources is 'x', not a list of objects"),
    ("plane_names", 5, "ranks[1].plane_names is 5, not a list of text"),
    ("chunk_rows", "x", "manifest's chunk_rows is 'x', not a positive integer"),
    ("label", ["a" * 100], "ranks[1].label is ['" + "a" * 35 + "..., not text"),  # a long value: cut
])
def test_every_manifest_field_is_typed_where_it_is_read(store, field, value, says):
    m = json.loads((store / "manifest.json").read_text())
    (m if field == "chunk_rows" else m["ranks"][1])[field] = value
    (store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TraceFormatError, match="damaged store") as e:
        Store(store)
    assert str(e.value).startswith(f"{store / 'manifest.json'}: ") and says in str(e.value)


def test_a_leftover_work_folder_is_removed_and_a_foreign_one_kept(store, tmp_path):
    """A convert killed part-way left its work folder beside -o: the next one clears it;
    a folder of that name holding anything else is not polyprof's to remove."""
    left = tmp_path / ".st.polyprof-new"
    (left / ".part-0").mkdir(parents=True)
    polyprof.load_ranks(GLOO[:1]).convert(store, overwrite=True)
    assert not left.exists() and Store(store).ranks == [0]
    (left / "mine.txt").parent.mkdir()
    (left / "mine.txt").write_text("mine")
    with pytest.raises(OutputError, match="is not one it left"):
        polyprof.load_ranks(GLOO[:1]).convert(store, overwrite=True)
    assert (left / "mine.txt").read_text() == "mine" and Store(store).ranks == [0]
    shutil.rmtree(left)


def test_the_current_directory_is_not_replaced(store, monkeypatch):
    """A store renamed over the current directory would leave the shell in a removed folder."""
    before = files_of(store)
    monkeypatch.chdir(store / "rank=0")
    with pytest.raises(OutputError, match="holds the current directory"):
        polyprof.load_ranks(GLOO[:1]).convert("..", overwrite=True)
    assert files_of(store) == before and leftovers(store) == []
