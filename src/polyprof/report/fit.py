"""Text cells shortened to a column's width so that different texts stay told apart
(kernel templates and argument lists differ late): the terminal tables' name columns."""

from __future__ import annotations

from .textout import _cells, cell_len, one_cell, set_cell_size

#: share of a shortened text cell given to the end of the text, tried in turn until the
#: rows of a column are told apart (kernel templates and argument lists differ late)
_TAIL_SHARES = (0.0, 0.4, 0.7, 1.0)


def _last_cells(s: str, n: int) -> str:
    """The end of ``s`` that fits in ``n`` cells."""
    if one_cell(s):  # one cell a character (most kernel and op names)
        return s[len(s) - n:] if 0 < n < len(s) else (s if n > 0 else "")
    out, used = [], 0
    for ch in reversed(s):
        used += cell_len(ch)
        if used > n:
            break
        out.append(ch)
    return "".join(reversed(out))


def elide(s: str, width: int, tail: int) -> str:
    """``s`` in ``width`` cells: its start, "…", and its last ``tail`` cells."""
    if _cells(s) <= width:
        return s
    if width <= 1:
        return set_cell_size(s, width)
    tail = min(tail, width - 1)
    end = _last_cells(s, tail) if tail else ""
    return set_cell_size(s, width - 1 - _cells(end)) + "…" + end


def _window(s: str, width: int, at: int) -> str:
    """``s`` in ``width`` cells: its start, "…", the text from just before index ``at`` on."""
    head = (width - 2) // 2
    lead = max(at - 4, 0)
    if lead <= head:
        return elide(s, width, 0)
    rest = s[lead:]
    room = width - head - 1
    mid = rest if _cells(rest) <= room else set_cell_size(rest, room - 1) + "…"
    return set_cell_size(s, head) + "…" + mid


def _common_prefix(texts: list[str]) -> int:
    lo, hi = min(texts), max(texts)
    n = 0
    while n < min(len(lo), len(hi)) and lo[n] == hi[n]:
        n += 1
    return n


def fit_texts(texts: list[str], width: int) -> list[str]:
    """Texts shortened to ``width`` cells so that different texts stay different: both
    ends kept (the split of the width that tells the rows apart), and where no split
    does, the rows that still collide show the text where they first differ."""
    if all(_cells(t) <= width for t in texts):
        return texts
    want = len(set(texts))
    best: list[str] = []
    for share in _TAIL_SHARES:
        out = [elide(t, width, round((width - 1) * share)) for t in texts]
        if len(set(out)) == want:
            return out
        if len(set(out)) > len(set(best)):
            best = out
    groups: dict[str, set[str]] = {}
    for t, o in zip(texts, best):
        groups.setdefault(o, set()).add(t)
    for shown, originals in groups.items():
        if len(originals) > 1:
            at = _common_prefix(list(originals))
            fixed = {t: _window(t, width, at) for t in originals}
            best = [fixed.get(t, o) if o == shown else o for t, o in zip(texts, best)]
    return best
