"""Times, rates and rank numbers as people read them, for the analyses' own sentences (a diff's
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


def fmt_share(pct: float) -> str:
    """A utilisation in percent to three significant digits (0.175, 24.7, 196), the same
    on the MFU line and in the low-MFU finding's title."""
    return "-" if pct != pct else f"{pct:.3g}"


def fmt_si(x: float, unit: str) -> str:
    """4.72 GFLOP, 19.8 TFLOP/s: three significant digits and an SI prefix."""
    if x != x:
        return "-"
    for p, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def fmt_rate(key: str, x: float) -> str:
    """A rate named ``*flops_per_s`` or ``*bytes_per_s`` (a finding's evidence) with its
    unit: 298 TFLOP/s, 3.1 TB/s."""
    return fmt_si(x, "FLOP/s" if key.endswith("flops_per_s") else "B/s" if key.endswith("bytes_per_s") else "/s")


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
