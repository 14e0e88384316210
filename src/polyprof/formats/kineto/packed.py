"""The args batches a trace keeps for their decode on first use, held deflated.

A Kineto trace's args are most of its text and are kept, as text, until a stat asks for
them (``deferred.py``); at tens of millions of events that text is most of the Trace's
memory. :class:`PackedBatches` keeps each batch deflated by ISA-L at its fastest level
(some GB/s; Kineto's args shrink about tenfold) and inflates a batch when it is read.
Without ISA-L the batches stay as they are (zlib's deflate would cost the load more than
a few percent).

A summary reads no batch: the args it looks up by row (an op's shapes, a kernel's launch
configuration) are taken by the tokenizer at load (``taken.py``). A batch the tokenizer
read is deflated from its slices' texts as they are (:meth:`PackedBatches.append_parts`),
never joined into one text first.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import overload


def _isal() -> ModuleType | None:
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - isal has wheels for the usual platforms
        return None
    return isal_zlib


isal_zlib = _isal()

#: whether batches are kept deflated (ISA-L is installed)
DEFLATED = isal_zlib is not None
#: raw deflate: no zlib header and no Adler-32 checksum to compute either way (the text never
#: leaves the process)
_RAW = -15


class PackedBatches(Sequence[tuple[int, bytes]]):
    """(first row, ``[args, ...]`` text) of each batch, as a list of them reads, each
    batch's text deflated; :attr:`bases` gives the first rows without inflating, and
    :attr:`names` each batch's arg names where the tokenizer found them (None: not known)."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.names: list[frozenset[str] | None] = []
        self._blobs: list[bytes] = []

    def append(self, batch: tuple[int, bytes], names: frozenset[str] | None = None) -> None:
        base, text = batch
        self.bases.append(base)
        self.names.append(names)
        self._blobs.append(text if isal_zlib is None else _deflate([text]))

    def append_parts(self, base: int, parts: list[bytes], names: frozenset[str] | None = None) -> None:
        """A batch given as the texts of its events' args in pieces (``args, args``; the
        batch is ``[`` + the pieces joined by commas + ``]``), deflated piece by piece."""
        if isal_zlib is None:
            return self.append((base, b"".join((b"[", b",".join(parts), b"]"))), names)
        self.bases.append(base)
        self.names.append(names)
        pieces = [b"["]
        for i, part in enumerate(parts):
            if i:
                pieces.append(b",")
            pieces.append(part)
        pieces.append(b"]")
        self._blobs.append(_deflate(pieces))

    def __len__(self) -> int:
        return len(self.bases)

    @overload
    def __getitem__(self, i: int) -> tuple[int, bytes]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, bytes]]: ...

    def __getitem__(self, i: int | slice) -> tuple[int, bytes] | list[tuple[int, bytes]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        blob = self._blobs[i]
        return self.bases[i], (blob if isal_zlib is None else isal_zlib.decompress(blob, _RAW))

    def nbytes(self) -> int:
        """Bytes held (deflated, or as they are)."""
        return sum(map(len, self._blobs))


def _deflate(pieces: list[bytes]) -> bytes:
    """The text the pieces make, deflated (raw, ISA-L's fastest level) piece by piece:
    never joined into one text first (the join's copy cost more than the deflate)."""
    assert isal_zlib is not None  # the callers' test
    z = isal_zlib.compressobj(0, isal_zlib.DEFLATED, _RAW)
    out = [z.compress(p) for p in pieces]
    out.append(z.flush())
    return b"".join(out)


def bases(batches: Sequence[tuple[int, bytes]]) -> list[int]:
    """The first rows of batches (packed or a plain list), without inflating any."""
    return batches.bases if isinstance(batches, PackedBatches) else [b for b, _ in batches]
