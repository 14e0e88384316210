"""Text cells shortened to a column's width so that different texts stay told apart
(kernel templates and argument lists differ late): the terminal tables' name columns."""

from __future__ import annotations

import re

from .textout import _cells, cell_len, cell_sizes, one_cell, set_cell_size


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


#: characters a name's parts are separated by: a window starts after one of them
_SEPARATORS = frozenset("_:<>,()[]{}.#/- ")
#: the rest of a name made of words alone (``: AccumulateGrad``, not ``<float>, Array<char*, 3> >``);
#: compiled on first use (re's cache)
_PLAIN = r"[\w:. #-]*$"
#: a name's last part, after "::", ".", ":" or a space (a method, an op, a function),
#: with the "::", "." or ":" before it
_LAST_PART = r"(?:::|[.:]|(?<= ))[A-Za-z_]\w*$"


def _tail(s: str, width: int) -> int:
    """How much of the end of ``s`` a cut keeps: its last part (``Class::Method``'s
    ``::Method``) where that takes at most 45% of the width, else nothing."""
    m = re.compile(_LAST_PART).search(s)
    if m is None or not one_cell(s):
        return 0
    part = m.group(0)
    if len(part) > 0.45 * width:
        part = part.lstrip(":.")
    return len(part) if len(part) <= 0.45 * width else 0


def _common_prefix(texts: list[str]) -> int:
    """The length of the start all ``texts`` share (a binary search: slices compare in C)."""
    lo, hi = min(texts), max(texts)
    a, b = 0, min(len(lo), len(hi))
    while a < b:
        m = (a + b + 1) // 2
        if lo[:m] == hi[:m]:
            a = m
        else:
            b = m - 1
    return a


def _last_difference(texts: list[str]) -> int:
    """The farthest position at which two of ``texts`` first differ (the common prefix
    of the closest pair, in sorted order)."""
    ordered = sorted(texts)
    return max(_common_prefix([a, b]) for a, b in zip(ordered, ordered[1:]))


def _start(texts: list[str], width: int) -> tuple[int, int]:
    """Where texts that share their first cells first differ, and where a window onto
    that difference starts (at the start of that part of the name, a few cells back)."""
    first = _common_prefix(texts)
    s0, at = texts[0], first
    while at > 0 and first - at < min(6, (width - 4) // 4) and s0[at - 1] not in _SEPARATORS:
        at -= 1
    return first, at


def _ends(texts: list[str], width: int) -> dict[str, str]:
    """Each text as its start, "…" and as much of its end as the width holds (its end
    from where the texts differ, at least, where that fits): for texts that differ in
    their last words (``autograd::engine::evaluate_function: AddmmBackward0``)."""
    _, at = _start(texts, width)
    least = min(6, (width - 2) // 3)
    return {t: elide(t, width, max(min(_cells(t[at:]), width - 1 - least), (width - 1) // 2)) for t in texts}


def _aligned(texts: list[str], width: int) -> dict[str, str]:
    """Each text as its start, "…", and a window from where they first differ on to where
    the closest two differ, as far as the width allows: the same window for all, so they
    read apart. Those still alike differ past it: they get a window of their own."""
    first, at = _start(texts, width)
    least = min(6, (width - 2) // 3)
    longest = max(_cells(t[at:]) for t in texts)
    if longest < width - least:  # every one's end from the window on: the starts take the rest
        lead = min(width - 1 - longest, at)
    else:  # the start short, the window as long as it must be
        want = _last_difference(texts) + 4 - at
        lead = min(max(min(width - 2 - want, (width - 2) // 2), least, 1), at)
    room = width - lead - 1
    out = {}
    for t in texts:
        rest = t[at:]
        out[t] = set_cell_size(t, lead) + "…" + (rest if _cells(rest) <= room else set_cell_size(rest, room - 1) + "…")
    groups: dict[str, list[str]] = {}
    for t, shown in out.items():
        groups.setdefault(shown, []).append(t)
    for group in groups.values():
        if len(group) > 1 and _common_prefix(group) > first:  # (else no window tells them apart)
            out.update(_aligned(group, width))
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans of a text, sorted and joined where they overlap or one character apart."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _windows(texts: list[str], width: int) -> dict[str, str] | None:
    """Each text as its start and, at the same places in all, a window onto each place
    where two of them first differ, "…" between: texts always read apart (the place where
    any two differ is one of those shown). None where the places do not fit the width,
    or a text is not one cell a character."""
    if not all(one_cell(t) for t in texts):
        return None
    ordered = sorted(texts)
    cuts = sorted({_common_prefix([a, b]) for a, b in zip(ordered, ordered[1:])})
    least, longest = min(min(6, (width - 2) // 3), cuts[0]), max(map(len, texts))
    for back, ahead in ((3, 3), (1, 1), (0, 0)):
        spans = _merged([(0, least), *((max(p - back, 0), p + 1 + ahead) for p in cuts)])
        spare = width - sum(b - a for a, b in spans) - len(spans)  # an ellipsis after each
        if spare >= 0:
            break
    else:
        return None
    a, b = spans[-1]
    grow = min(spare - spare // 2, max(longest - b, 0))
    spans = _merged([(0, spans[0][1] + spare - grow), *spans[1:-1], (a, b + grow)])
    out = {}
    for t in texts:
        parts = [t[a:b] for a, b in spans if a < len(t)]
        out[t] = "…".join(parts) + ("…" if len(t) > spans[len(parts) - 1][1] else "")
    return out


def _apart(texts: list[str], width: int) -> dict[str, str]:
    """Texts that start alike, shortened so they read apart: their ends where they
    differ in their last words, else one window onto where they differ, else windows
    onto each place where two differ."""
    plain, at = re.compile(_PLAIN), _start(texts, width)[1]
    if all(plain.match(t, at) for t in texts):
        ends = _ends(texts, width)
        if len(set(ends.values())) == len(texts):
            return ends
    aligned = _aligned(texts, width)
    if len(set(aligned.values())) == len(texts):
        return aligned
    return _windows(texts, width) or aligned


def fit_texts(texts: list[str], width: int) -> list[str]:
    """Texts shortened to ``width`` cells so that different texts stay different: each
    its start, "…" and its last part (:func:`_tail`) where that tells it from the others;
    texts that start alike as :func:`_apart` tells them apart."""
    if not texts or max(cell_sizes(texts)) <= width:
        return texts
    groups: dict[str, list[str]] = {}
    for t in set(texts):
        groups.setdefault(elide(t, width, 0), []).append(t)
    out: dict[str, str] = {}
    for group in groups.values():
        if len(group) == 1 or width < 4:
            out.update((t, elide(t, width, _tail(t, width))) for t in group)
        else:
            out.update(_apart(sorted(group), width))
    group_of = {t: group for group in groups.values() for t in group}
    for _ in range(8):  # texts that start differently and were shortened alike: their groups as one
        alike: dict[str, list[str]] = {}
        for t, shown in out.items():
            alike.setdefault(shown, []).append(t)
        clashes = [group for group in alike.values() if len(group) > 1]
        if not clashes or width < 4:
            break
        for clash in clashes:
            alone = _windows(sorted(clash), width)
            others = {shown for t, shown in out.items() if t not in clash}
            if alone is not None and others.isdisjoint(alone.values()):
                out.update(alone)
                continue
            union = sorted({u for t in clash for u in group_of[t]})
            out.update(_windows(union, width) or alone or _aligned(union, width))
            group_of.update((t, union) for t in union)
    return [out[t] for t in texts]
