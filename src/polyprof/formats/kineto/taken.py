"""The args taken by name at load: per name, the events that have it and a code of its value.

Analyses look up a few args for some events only (an op's input shapes for its FLOPs, a
kernel's launch configuration, a collective's sizes: ``args.BY_ROW``). The compiled
tokenizer (``_tokens.c``, ``Tokenizer.take``) finds them while it reads each event's
args anyway, and gives at the end, per name, the rows of the events that have it, a code
per row, and the JSON text of each distinct value once (``Tokenizer.taken``).
:meth:`TakenArgs.select` then answers ``DeferredArgs.rows`` from these columns in the
shape ``_args.select`` gives: no args batch is read (or inflated, ``packed.py``) for them.

Only a whole file read by the tokenizer, every event's args read exactly (no escaped or
repeated names), is taken; otherwise the reader keeps none and the lookups walk the
batches as before.
"""

from __future__ import annotations

import numpy as np


class TakenArgs:
    """The taken args of one file: per name, ``rows`` (int32, ascending), their value
    ``codes`` (int32) and ``values`` (each distinct value's JSON text, by code)."""

    def __init__(self, names: tuple[str, ...], per_name: tuple[tuple[bytes, bytes, list[bytes]], ...]):
        self.names = names
        self.rows = {n: np.frombuffer(r, np.int32) for n, (r, _, _) in zip(names, per_name)}
        self.codes = {n: np.frombuffer(c, np.int32) for n, (_, c, _) in zip(names, per_name)}
        self.values = {n: v for n, (_, _, v) in zip(names, per_name)}

    def select(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, bytes, np.ndarray] | None:
        """Of ``rows`` (int64, ascending, distinct), those that have arg ``name``: (rows,
        each one's index into the distinct values among them, their texts joined
        ``[v,v,...]``, their lengths), as ``_args.select`` gives them; None where none has it."""
        have = self.rows[name]
        if not len(have) or not len(rows):
            return None
        pos = np.searchsorted(have, rows.astype(np.int32))  # every row is an int32 where anything is taken
        pos[pos == len(have)] = 0
        hit = have[pos] == rows
        if not hit.any():
            return None
        codes = self.codes[name][pos[hit]]
        values = self.values[name]
        present = np.zeros(len(values), bool)  # the distinct values among these rows, in code order
        present[codes] = True
        used = np.flatnonzero(present)
        index = (np.cumsum(present) - 1)[codes]
        texts = [values[c] for c in used.tolist()]
        lens = np.fromiter(map(len, texts), np.int64, len(texts))
        return rows[hit], index.astype(np.int64), b"[" + b",".join(texts) + b"]", lens
