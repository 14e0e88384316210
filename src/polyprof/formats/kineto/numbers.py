"""Times in µs as JSON text -> exact int64 ns (Kineto prints three decimals: ns)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import orjson

from ...errors import TraceFormatError
from ..safety import TIME_LIMIT_NS

#: Beyond this many µs a float64 cannot hold three decimals exactly (ulp > 1 ns).
_EXACT_LIMIT_US = float(2 ** 43)
#: Times beyond +-2**62 ns are damage, not a clock (and sums of two must fit in int64).
_RANGE_US = float(TIME_LIMIT_NS) / 1000


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """µs (float64) -> int64 ns, taking the shortest decimal (<= 3 places) the float stands for.

    A double cannot hold e.g. 1712195495519689.8 exactly; the shortest decimal within
    half an ulp is what the writer printed, so short decimals come back exact.
    """
    us = np.where(np.isfinite(us), us, 0.0)
    whole = np.floor(us)
    f3 = (us - whole) * 1000.0
    half = np.spacing(np.abs(us)) * 500.0 + 1e-9
    best = np.rint(f3)
    for step in (10.0, 100.0, 1000.0):
        cand = np.rint(f3 / step) * step
        best = np.where(np.abs(cand - f3) <= half, cand, best)
    return whole.astype(np.int64) * 1000 + best.astype(np.int64)


def _parse_numbers(text: bytes, dtype: type) -> np.ndarray | None:
    """Whitespace-separated numbers -> array (None if a token is not a number)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy warns when it stops before the end
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except ValueError:
            return None


def _ns_of(raws: list, path: Path, what: str) -> np.ndarray:
    """JSON texts of times in µs (``msgspec.Raw``) -> int64 ns (:func:`_times`; a
    ``null`` or missing value is 0: a ``dur``)."""
    return _times(raws, path, what)[0]


def _times(raws: list, path: Path, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """JSON texts of times in µs (``msgspec.Raw``) -> int64 ns, exact to the digit, and
    where a value is unset (``null``, missing, or a string such as ``"nan"``: no time at
    all; read as 0) as a bool mask, None if every value is set.

    Kineto prints three decimals (ns) or none: those texts are parsed as integers by
    NumPy (``12.047`` is read as the pair ``12 1047``: the leading 1 keeps the zeros
    and shows that there are exactly three digits). Other texts go through floats:
    :func:`_us_to_ns` takes the shortest decimal, and values too big for a double to
    hold their ns are read from their text. Strings holding numbers are read as numbers,
    as before.
    """
    n = len(raws)
    if not n:
        return np.zeros(0, np.int64), None
    joined = b" ".join(raws)
    dots = joined.count(b".")
    if (dots == n or dots == 0) and b"e" not in joined and b"E" not in joined and b"-" not in joined:
        if dots:
            pairs = _parse_numbers(joined.replace(b".", b" 1"), np.int64)
            if pairs is not None and len(pairs) == 2 * n:
                whole, frac = pairs[0::2], pairs[1::2]
                if frac.min() >= 1000 and frac.max() <= 1999 and whole.max() < 9 * 10 ** 15:
                    return whole * 1000 + (frac - 1000), None
        else:
            ints = _parse_numbers(joined, np.int64)
            if ints is not None and len(ints) == n and ints.max() < 9 * 10 ** 15:  # ns fit in int64
                return ints * 1000, None
    try:
        values = orjson.loads(b"[" + b",".join(raws) + b"]")
    except orjson.JSONDecodeError as e:  # e.g. 1e400: a number that is not a finite double
        raise TraceFormatError(path, f"invalid JSON: an event {what} ({e})") from None
    us = _floats(values, path, what)
    unset = np.isnan(us)  # null (None), or a string such as "nan"
    far = np.flatnonzero(np.abs(us) > _RANGE_US)
    if len(far):
        raise OutOfRange(path, f"an event {what} of {values[far[0]]!r} µs is beyond the range of "
                               "int64 ns (+-2**62 ns, about 146 years)")
    out = _us_to_ns(us)
    big = np.abs(us) >= _EXACT_LIMIT_US  # a double's ulp here is more than 1 ns
    if big.any():
        rows = [i for i in np.flatnonzero(big).tolist() if type(values[i]) in (int, float)]
        if rows:
            out[rows] = _exact_ns([bytes(raws[i]) for i in rows], us[rows])
    return out, (unset if unset.any() else None)


def _exact_ns(texts: list[bytes], approx_us: np.ndarray) -> np.ndarray:
    """JSON number texts in µs -> exact integer ns.

    Texts with up to three decimals are parsed as digits; others (exponents, more
    decimals) go through :func:`_us_to_ns`, rounded to the ns.
    """
    out = _us_to_ns(approx_us)
    arr = np.array(texts, dtype=bytes)
    plain = (np.char.find(arr, b"e") < 0) & (np.char.find(arr, b"E") < 0)
    dot = np.char.find(arr, b".")
    decimals = np.where(dot >= 0, np.char.str_len(arr) - dot - 1, 0)
    for k in range(4):
        m = plain & (decimals == k)
        if m.any():
            out[m] = np.char.replace(arr[m], b".", b"").astype(np.int64) * 10 ** (3 - k)
    return out


class NotANumber(TraceFormatError):
    """A time that is not a number (a string of letters, an object): the reader drops
    that event and counts it (``collector.py``); other bad times refuse the file."""

    #: what the dropped events' times were, in the count's words
    dropped_as = "not a number"


class OutOfRange(NotANumber):
    """A time beyond +-2**62 ns (damage, not a clock): dropped and counted as a time that
    is not a number is, as the Nsight, RPD, rocprofv3 and Perfetto readers drop such rows
    (before, one such event refused the whole file)."""

    dropped_as = "beyond +-2**62 ns (about 146 years)"


def _floats(values: list, path: Path, what: str) -> np.ndarray:
    try:
        out = np.array(values, dtype=np.float64)
        if out.shape == (len(values),):  # not [[]] or [[1], [2]]: lists make it 2-D
            return out
    except (TypeError, ValueError):
        pass
    out = np.empty(len(values), np.float64)
    for i, v in enumerate(values):
        try:
            out[i] = float(v) if v is not None else np.nan
        except (TypeError, ValueError):
            raise NotANumber(path, f"event {what} {v!r} is not a number") from None
    return out


def int_values(values: np.ndarray) -> np.ndarray:
    """Integers of args' values (text or numbers) as int64; -1 where one is not an
    integer or does not fit (a reader's pass over a few args: ``ascend.py``,
    ``rocprof_v1.py``)."""
    out = np.full(len(values), -1, np.int64)
    for i, v in enumerate(values.tolist()):
        try:
            out[i] = int(v)
        except (TypeError, ValueError, OverflowError):
            pass
    return out
