"""Byte-level damage to a Kineto/Chrome JSON text where a tokenizer has to trust it
(formats/kineto/_tokens.c, slicing.py): cut inside a string, an escape or a number;
brackets added or dropped at any place; NUL bytes and invalid UTF-8; deep nesting;
huge numbers; duplicate keys; ts/dur/pid/tid/args of the wrong type.

Deterministic in the ``random.Random`` given, as mutators.py.
"""

from __future__ import annotations

import random
import re

_KEY = re.compile(rb'"(ph|ts|dur|pid|tid|args|name|cat|id|bp|s)"\s*:\s*')
WRONG = [b'"12"', b'"1.5"', b"null", b"true", b"[]", b"{}", b'{"a":1}', b"[1,2]", b"-0", b"1e400", b"-1e400",
         b"1E+2", b"0.0001", b"123456789012345678901234567890", b"9223372036854775808", b"-9223372036854775809",
         b"1.23456789012345678901", b'"\\u0000"', b'"\\ud800"', b'"\xff\xfe"', b'"\xc3"', b"NaN", b"Infinity",
         b"01", b"1.", b".5", b"+1", b"--1", b'"x', b"[", b"{", b"]", b"}", b'"\\', b'"\\u12', b"4000000000000000",
         b"3999999999999999.999", b"-3999999999999999.9999"]
INSERTS = [b"\x00", b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"[", b"]", b"{", b"}",
           b",", b":", b'"', b"\\", b"\\u", b",,", b"[" * 70 + b"]" * 70, b"{\"a\":" * 70 + b"1" + b"}" * 70,
           b"\n", b"\t", b"\r\n", b" " * 64, b"\"\\uD834\\uDD1E\"", b"\x1b", b"\x7f"]


def _value_end(b: bytes, i: int) -> int:
    """The end of the JSON value starting at ``i`` (a rough scan: strings, brackets)."""
    depth, j, n = 0, i, len(b)
    while j < n:
        c = b[j]
        if c == 0x22:  # '"'
            j += 1
            while j < n and b[j] != 0x22:
                j += 2 if b[j] == 0x5C else 1
        elif c in b"[{":
            depth += 1
        elif c in b"]}":
            if depth == 0:
                return j
            depth -= 1
            if depth == 0:
                return j + 1
        elif c == 0x2C and depth == 0:  # ','
            return j
        j += 1
    return n


def json_bytes(raw: bytes, rnd: random.Random) -> bytes:
    """One or two edits of a JSON text."""
    b = raw
    for _ in range(rnd.choice([1, 1, 2])):
        n = len(b)
        if n < 2:
            return b + rnd.choice(INSERTS)
        op = rnd.random()
        keys = [m for m in _KEY.finditer(b, 0, min(n, 1 << 20))] if op < 0.45 else []
        if keys:  # a field's value replaced, or the field written twice
            m = rnd.choice(keys)
            end = _value_end(b, m.end())
            if rnd.random() < 0.8:
                b = b[:m.end()] + rnd.choice(WRONG) + b[end:]
            else:
                b = b[:m.start()] + m.group(0) + rnd.choice(WRONG) + b"," + b[m.start():]
        elif op < 0.6:  # cut: anywhere, or just inside a string, an escape or a number
            at = rnd.randrange(1, n)
            if rnd.random() < 0.6:
                want = rnd.choice([b'"', b"\\", b".", b"e", b"1", b"{", b":"])
                k = b.find(want, at)
                at = k + rnd.choice([0, 1]) if k > 0 else at
            b = b[:at]
        elif op < 0.85:  # an odd byte or bracket inserted
            at = rnd.randrange(n)
            b = b[:at] + rnd.choice(INSERTS) + b[at:]
        elif op < 0.95:  # a bracket, quote or comma dropped
            hits = [m.start() for m in re.finditer(rb'[\[\]{}",:]', b[:1 << 20])]
            if hits:
                at = rnd.choice(hits)
                b = b[:at] + b[at + 1:]
        else:  # a number made huge
            hits = [m for m in re.finditer(rb"-?\d+(\.\d+)?", b[:1 << 20])]
            if hits:
                m = rnd.choice(hits)
                b = b[:m.start()] + rnd.choice([b"9" * 400, b"1" + b"0" * 30, b"1e999", b"0." + b"0" * 500 + b"1",
                                                b"-" + b"9" * 25]) + b[m.end():]
    return b
