"""Text cells shortened to a column's width so that different texts stay told apart
(kernel templates and argument lists differ late): the terminal tables' name columns.
Generated kernel names made of words (cuBLAS's, cuDNN's, TensorRT's
``sm80_xmma_fprop_..._tilesize128x128x32_stage4_...``) show the words that tell them
apart, whole (:func:`_words`)."""

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


#: characters of a text's start, and as many of its end, that fitting it to a cell looks
#: at (at least twice the cell's width): a longer text is cut to them first, "…" between
#: (:func:`bounded`), so a cell costs as much whatever its text's length (a 100 MB name
#: took 16 s of ``summary``, its whole text scanned for every table)
SCAN_CHARS = 2048


def bounded(s: str, width: int) -> str:
    """``s``, or where it is longer than :data:`SCAN_CHARS` (or four widths) at each
    end, its start and its end, "…" between: what the cell can show of it. Texts that
    differ only between the two read alike."""
    keep = max(SCAN_CHARS, 2 * width)
    return s if len(s) <= 2 * keep + 1 else s[:keep] + "…" + s[-keep:]


def elide(s: str, width: int, tail: int) -> str:
    """``s`` in ``width`` cells: its start, "…", and its last ``tail`` cells."""
    s = bounded(s, width)
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


def _telling(words: list[str], differ: list[int], have: dict[str, int], others: int) -> list[int]:
    """Which of a name's differing words tell it from the others (a bit each in
    ``others``; ``have``: the names each word is in): each time the word the fewest of
    those still alike have (the first in the name of equals), until none is left alike
    or no word narrows them further."""
    chosen: list[int] = []
    while others:
        alike, i = min(((have[words[i]] & others).bit_count(), i) for i in differ)
        if alike == others.bit_count():
            break
        chosen.append(i)
        others &= have[words[i]]
    return chosen


def _fit_words(t: str, spans: list[tuple[int, int]], shown: set[int], width: int) -> tuple[list[list[int]], int] | None:
    """The runs (first and last index) of the words of ``t`` in ``shown``, two runs one
    short word apart as one (``nt_n_tilesize``: the ``n``) where that fits, and their
    cells as :func:`_word_text` shows them, if they fit ``width``; else None."""
    order, last = sorted(shown), len(spans) - 1
    for bridge in (True, False):
        runs: list[list[int]] = []
        bridged = False
        for i in order:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            elif bridge and runs and i == runs[-1][1] + 2 and spans[i - 1][1] - spans[i - 1][0] <= 2:
                runs[-1][1], bridged = i, True
            else:
                runs.append([i, i])
        cells = len(runs) - 1 + (runs[0][0] > 0) + (runs[-1][1] < last)  # the ellipses
        for a, b in runs:
            cells += (len(t) if b == last else spans[b][1]) - (0 if a == 0 else spans[a][0])
        if cells <= width:
            return runs, cells
        if not bridged:
            break
    return None


def _word_text(t: str, spans: list[tuple[int, int]], runs: list[list[int]]) -> str:
    """``t`` as ``runs`` of its words, "…" between and where they leave out its start
    or its end."""
    last = len(spans) - 1
    return ("" if runs[0][0] == 0 else "…") + "…".join(
        t[0 if a == 0 else spans[a][0]:len(t) if b == last else spans[b][1]] for a, b in runs) + (
        "" if runs[-1][1] == last else "…")


def _word_cost(t: str, spans: list[tuple[int, int]], i: int) -> int:
    """The most cells showing word ``i`` of ``t`` can add to a cell of its words: from
    the end of the word before to its end (the name's end for its last), and a "…"."""
    return (len(t) if i == len(spans) - 1 else spans[i][1]) - (spans[i - 1][1] if i else 0) + 1


def _word_runs(t: str, spans: list[tuple[int, int]], shown: set[int], differ: list[int],
               width: int) -> tuple[set[int], int] | None:
    """The ``shown`` words of ``t`` and, as the room in ``width`` cells allows, the
    other words that differ, in order, and the cells left; None where the shown words
    do not fit. (Measured only where a word's most cells do not fit what is left.)"""
    fit = _fit_words(t, spans, shown, width)
    if fit is None:
        return None
    slack = width - fit[1]
    for extra in differ:
        if extra not in shown:
            cost = _word_cost(t, spans, extra)
            if cost > slack:
                fit = _fit_words(t, spans, shown | {extra}, width)
                if fit is None:
                    continue
                cost = fit[1] - width + slack
            shown, slack = shown | {extra}, slack - cost
    return shown, slack


#: the most names :func:`_words` tells apart (more: the windows)
MAX_WORDS_NAMES = 100


def _words(texts: list[str], width: int) -> dict[str, str] | None:
    """Names made of words (``sm80_xmma_fprop_..._tilesize128x128x32_stage4_..._kernel_trt``)
    as their first word, the words that tell each from the others of those not in
    every name (tile size, layout, stage, ``aACCESS``), whole, then the others not in
    every name, and as many more of their first words as every name has room for,
    "…" between. None where a name is not all words, its words do not fit or two read
    alike; None for more than :data:`MAX_WORDS_NAMES` names too (its choice is
    quadratic in them: a table's top rows are a few dozen)."""
    if len(texts) > MAX_WORDS_NAMES or not all(t.replace("_", "").isalnum() and one_cell(t) for t in texts):
        return None
    spans, words = [], []
    for t in texts:
        sp, ws, at = [], [], 0
        for w in t.split("_"):
            if w:
                sp.append((at, at + len(w)))
                ws.append(w)
            at += len(w) + 1
        spans.append(sp)
        words.append(ws)
    have: dict[str, int] = {}
    for k, ws in enumerate(words):
        for w in ws:
            have[w] = have.get(w, 0) | 1 << k
    every = (1 << len(texts)) - 1
    rows, slack, leadless = [], [], set()
    for k, (t, sp, ws) in enumerate(zip(texts, spans, words)):
        differ = [i for i, w in enumerate(ws) if have[w] != every]
        chosen = set(_telling(ws, differ, have, every & ~(1 << k)) if differ else ())
        row = _word_runs(t, sp, {0} | chosen, differ, width)
        if row is None and chosen:  # the words that tell it apart without its first
            row = _word_runs(t, sp, chosen, differ, width)
            leadless.add(k)
        if row is None:
            return None
        rows.append(row[0])
        slack.append(row[1])
    for lead in range(1, min(map(len, spans))):  # more of the start, as much for every name
        more = [k for k in range(len(texts)) if k not in leadless and lead not in rows[k]]
        cost = [_word_cost(texts[k], spans[k], lead) for k in more]
        if any(c > slack[k] for k, c in zip(more, cost)):
            trials = [_fit_words(texts[k], spans[k], rows[k] | {lead}, width) for k in more]
            if not all(trials):
                break
            cost = [fit[1] - width + slack[k] for k, fit in zip(more, trials) if fit]
        for k, c in zip(more, cost):
            rows[k].add(lead)
            slack[k] -= c
    out = {}
    for t, sp, shown in zip(texts, spans, rows):
        fit = _fit_words(t, sp, shown, width)
        if fit is None:
            return None
        out[t] = _word_text(t, sp, fit[0])
    return out if len(set(out.values())) == len(texts) else None


def _word_groups(groups: dict[str, list[str]], width: int) -> dict[str, str]:
    """Names made of words whose first three words or more are alike (a table's cuBLAS
    kernels: ``sm90_xmma_gemm_..._nt_n_...``, ``..._tn_n_...``), their groups
    (by their first cells; one of them of two names or more) made one where
    :func:`_words` tells them all apart, and shown so: the layout is then one of the
    words that tell them apart, not a word in every name of a group."""
    keys = sorted(k for k, group in groups.items() if k.endswith("…") and group[0].replace("_", "").isalnum())
    chains: list[list[str]] = []
    for a, b in zip([""] + keys, keys):
        if chains and b.count("_", 0, _common_prefix([a, b])) >= 3:
            chains[-1].append(b)
        else:
            chains.append([b])
    out: dict[str, str] = {}
    for chain in chains:
        if len(chain) > 1 and width >= 4 and any(len(groups[k]) > 1 for k in chain):
            union = sorted(t for k in chain for t in groups[k])
            words = _words(union, width)
            if words is not None:
                out.update(words)
                for k in chain:
                    groups[k] = union
    return out


def _apart(texts: list[str], width: int) -> dict[str, str]:
    """Texts that start alike, shortened so they read apart: their ends where they
    differ in their last words, else the words that tell them apart (:func:`_words`),
    else one window onto where they differ, else windows onto each place where two
    differ."""
    plain, at = re.compile(_PLAIN), _start(texts, width)[1]
    if all(plain.match(t, at) for t in texts):
        ends = _ends(texts, width)
        if len(set(ends.values())) == len(texts):
            return ends
    words = _words(texts, width)
    if words is not None:
        return words
    aligned = _aligned(texts, width)
    if len(set(aligned.values())) == len(texts):
        return aligned
    return _windows(texts, width) or aligned


def fit_texts(texts: list[str], width: int) -> list[str]:
    """Texts shortened to ``width`` cells so that different texts stay different: each
    its start, "…" and its last part (:func:`_tail`) where that tells it from the others;
    texts that start alike as :func:`_apart` tells them apart. A long text is seen by
    its ends alone (:func:`bounded`): the work a cell is bounded whatever its length."""
    if not texts:
        return texts
    seen = {t: bounded(t, width) for t in set(texts)}
    if any(len(b) < len(t) for t, b in seen.items()):  # (the texts cut are no longer cut again)
        cut = sorted(set(seen.values()))
        by_cut = dict(zip(cut, fit_texts(cut, width)))
        return [by_cut[seen[t]] for t in texts]
    if max(cell_sizes(texts)) <= width:
        return texts
    groups: dict[str, list[str]] = {}
    for t in set(texts):
        groups.setdefault(elide(t, width, 0), []).append(t)
    out = _word_groups(groups, width)
    for group in groups.values():
        if group[0] in out:
            continue
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
            union = sorted({u for t in clash for u in group_of[t]})
            words = _words(union, width)  # names made of words: all of their groups' words apart
            if words is not None and {shown for t, shown in out.items() if t not in union}.isdisjoint(words.values()):
                out.update(words)
                group_of.update((t, union) for t in union)
                continue
            alone = _windows(sorted(clash), width)
            others = {shown for t, shown in out.items() if t not in clash}
            if alone is not None and others.isdisjoint(alone.values()):
                out.update(alone)
                continue
            out.update(_windows(union, width) or alone or _aligned(union, width))
            group_of.update((t, union) for t in union)
    return [out[t] for t in texts]
