"""The compiled parsers' own entry points called with damaged bytes, no reader around them
(scripts/fuzz_native.py ``--parsers direct-tokens,direct-args,...``).

A reader checks much before its C pass sees the bytes (msgspec validates a batch's args
text, protobuf frames the packets); called directly, each pass gets text it must bound
by itself: a slice of ``traceEvents`` (``_tokens.Tokenizer.scan`` and ``learn``), a
batch of args objects (``_args.names``, ``groups``, ``select`` with rows and names
drawn at random), the args of ``[memory]`` events (``_kineto_memory.columns``), a packet
stream (``_walk.frame``), an XSpace (``_wire.columns``). Expected: a result, None, or
ValueError / OverflowError / TypeError; never a crash, an ASan or UBSan report or a hang.
"""

from __future__ import annotations

import json
import random
from typing import Callable

import numpy as np

from . import native

TARGETS = ("tokens", "args", "memory", "walk", "wire")
_ARG_NAMES = ["Input Dims", "Input type", "Concrete Inputs", "stream", "grid", "External id", "Bytes", "Addr", "a"]


def _events(doc: object) -> list:
    evs = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [e for e in evs if isinstance(e, dict)] if isinstance(evs, list) else []


def load_seeds(target: str) -> list[tuple[str, bytes]]:
    """The texts or bytes each entry point reads, from the readers' seeds."""
    if target in ("walk", "wire"):
        return native.load_seeds("perfetto" if target == "walk" else "xspace")
    out = []
    for name, data in native.load_seeds("kineto"):
        evs = _events(json.loads(data))
        if target == "tokens":
            out.append((name, json.dumps(evs).encode()[1:-1]))
        elif target == "args":
            out.append((name, json.dumps([e.get("args", {}) for e in evs]).encode()))
        else:
            mem = [e.get("args", {}) for e in evs if e.get("name") == "[memory]"]
            if mem:
                out.append((name, json.dumps(mem[:400]).encode()))
    return out


def mutate(target: str, seeds: list[tuple[str, bytes]], seed: int, index: int) -> tuple[str, bytes]:
    rnd = random.Random(f"direct:{target}:{seed}:{index}")
    name, data = rnd.choice(seeds)
    edits = native.EDITS["perfetto" if target in ("walk", "wire") else "kineto"]
    for _ in range(rnd.choice([1, 1, 2, 3])):
        data = rnd.choice(edits)(data, rnd)
    return name, data


def _tokens(data: bytes, rnd: random.Random) -> None:
    from polyprof.formats.kineto import _tokens

    from polyprof.formats.kineto.args import BY_ROW

    tok = _tokens.Tokenizer()
    if rnd.random() < 0.5:  # the args taken by name (taken.py), given at the end
        tok.take(BY_ROW)
    for _ in range(2):  # the second scan with the codes of the first's new keys learnt
        got = tok.scan(data, rnd.choice([len(data), len(data), rnd.randrange(len(data) + 1)]))
        if got is None:
            break
        for t, keys in enumerate(got[20][:3]):
            if keys:
                tok.learn(t, np.arange(len(keys), dtype=np.int64).tobytes())
    taken = tok.taken()
    if taken is not None:
        names, per = taken
        for rows, codes, values in per:
            assert len(rows) == len(codes) and all(0 <= c < len(values) for c in np.frombuffer(codes, np.int32))


def _args(data: bytes, rnd: random.Random) -> None:
    from polyprof.formats.kineto import _args
    from polyprof.formats.kineto.deferred import _SKIPPED

    for call in (lambda: _args.names(data), lambda: _args.groups(data, rnd.choice([0, 7, -3]), _SKIPPED)):
        try:
            call()
        except ValueError:
            pass
    rows = np.unique(np.array([rnd.randrange(-5, 3000) for _ in range(rnd.randint(0, 60))], np.int64))
    names = tuple(rnd.sample(_ARG_NAMES, rnd.randint(1, 4)))
    _args.select(data, rnd.choice([0, 0, 5, -3]), names, rows.tobytes())


def _memory(data: bytes, rnd: random.Random) -> None:
    from polyprof.formats import _kineto_memory

    _kineto_memory.columns(data)


def _walk(data: bytes, rnd: random.Random) -> None:
    from polyprof.formats.perfetto_read import _walk

    _walk.frame(data)


def _wire(data: bytes, rnd: random.Random) -> None:
    from polyprof.formats.xspace import _wire

    _wire.columns(data)


CALLS: dict[str, Callable[[bytes, random.Random], None]] = {
    "tokens": _tokens, "args": _args, "memory": _memory, "walk": _walk, "wire": _wire}


def call(target: str, data: bytes, seed: int, index: int) -> str:
    """"ok", or "error" for the exceptions a pass may raise on bad bytes."""
    try:
        CALLS[target](data, random.Random(f"call:{target}:{seed}:{index}"))
    except (ValueError, OverflowError, TypeError):
        return "error"
    return "ok"
