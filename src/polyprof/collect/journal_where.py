"""Where this process's crash journal asked for at a path went: ``OUTPUT.partial.N``
while another run writes ``OUTPUT.partial`` (collect/journal_file.py). What the notes
on a trace not written name (collect/output.py, collect/exits.py); a module of its own so
that they need not import the journal's file handling."""

from __future__ import annotations

from pathlib import Path

#: the path asked for -> where the journal is (set as each journal is made)
_at: dict[Path, Path] = {}


def where(asked: str | Path) -> Path:
    """Where this process's journal asked for at ``asked`` is (``asked`` itself where
    none was made elsewhere)."""
    return _at.get(Path(asked), Path(asked))
