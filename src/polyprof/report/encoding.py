"""polyprof's text on an output that cannot encode it.

The tables draw their lines with box-drawing characters and the figures use ``µ``, ``×``
and ``…``. Where the output's encoding is not a Unicode one (``LC_ALL=C`` or ``POSIX``
without ``PYTHONUTF8``: Python's streams are then ASCII), writing them raised
``UnicodeEncodeError`` and the command failed. While :func:`encodable` holds, such a
stream writes each character it cannot encode as its ASCII look-alike (``─`` as ``-``,
``µ`` as ``u``, ``…`` as ``...``), any other as ``?``: rich draws its own panels in ASCII
there already (its ``ascii_only``). Streams in UTF-8 are left alone, and the stream's
error handler is put back afterwards (``polyprof run``'s program keeps its own).
"""

from __future__ import annotations

import codecs
import contextlib
from io import TextIOWrapper
from typing import IO, Iterator, cast

#: the name of the error handler (``codecs.register_error``)
HANDLER = "polyprof.ascii_lookalike"

#: look-alikes of the characters polyprof writes (box drawing: :func:`_box`)
_SUBSTITUTES = {
    **dict.fromkeys("▏▎▍▌▋▊▉█▇▆▅▄▃▂▁", "#"),
    "…": "...", "µ": "u", "μ": "u", "×": "x", "·": ".", "—": "-", "–": "-", "−": "-", "≤": "<=", "≥": ">=",
    "→": "->", "←": "<-", "±": "+-", "≈": "~", "Δ": "d", "’": "'", "‘": "'", "“": '"', "”": '"',
    "\u00a0": " ", "●": "*",
}


def _box(c: str) -> str:
    """A box-drawing character's look-alike by the directions its Unicode name gives: a
    horizontal line ``-``, a vertical one ``|``, a corner, a tee or a cross ``+``."""
    import unicodedata  # only once a character cannot be written (an ASCII locale)

    words = set(unicodedata.name(c, "").split())
    across, down = bool(words & {"HORIZONTAL", "LEFT", "RIGHT"}), bool(words & {"VERTICAL", "UP", "DOWN"})
    return "-" if across and not down else "|" if down and not across else "+"


def _lookalike(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(_box(c) if "\u2500" <= c <= "\u257f" else _SUBSTITUTES.get(c, "?") for c in text), error.end


codecs.register_error(HANDLER, _lookalike)


def _unicode(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


@contextlib.contextmanager
def encodable(*streams: IO[str]) -> Iterator[None]:
    """While the block runs, those of ``streams`` whose encoding is not a Unicode one
    write what they cannot encode as ASCII look-alikes (see the module's doc)."""
    changed: list[tuple[IO[str], str | None]] = []
    for s in streams:
        encoding = getattr(s, "encoding", None)
        if not isinstance(encoding, str) or _unicode(encoding) or not hasattr(s, "reconfigure"):
            continue
        try:
            before = getattr(s, "errors", None)
            s.flush()
            cast(TextIOWrapper, s).reconfigure(errors=HANDLER)
        except (OSError, ValueError):  # closed, or not reconfigurable now: left as it is
            continue
        changed.append((s, before))
    try:
        yield
    finally:
        for s, before in changed:
            with contextlib.suppress(OSError, ValueError):
                s.flush()
                cast(TextIOWrapper, s).reconfigure(errors=before)
