"""Times and rank numbers as people read them, for the analyses' own sentences (a diff's
verdict) and every report."""

from __future__ import annotations


def fmt_ns(ns: float) -> str:
    """Human time: 1.23 s, 4.56 ms, 7.89 µs, 12 ns."""
    ns = float(ns)
    if ns != ns:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(x: float) -> str:
    return "-" if x != x else f"{x:.1f}%"


def fmt_bytes(b: float) -> str:
    """Bytes with a sign (a change): +32.0 MiB."""
    if b != b:
        return "-"
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:+.1f} {unit}"
    return f"{b:+.0f} B"


def fmt_size(b: float) -> str:
    """Bytes without a sign: 32.0 MiB."""
    return fmt_bytes(b).lstrip("+")


def fmt_num(x: float) -> str:
    return "-" if x != x else f"{x:.4g}"


def number_ranges(numbers: list[int]) -> str:
    """Sorted numbers (ranks, steps) as runs: ``[0, 1, 2, 3, 5, 7]`` as "0-3, 5, 7"."""
    out, i = [], 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(f"{numbers[i]}" if i == j else f"{numbers[i]}-{numbers[j]}")
        i = j + 1
    return ", ".join(out)
