"""The args batches a trace keeps for their decode on first use, held deflated.

A Kineto trace's args are most of its text and are kept, as text, until a stat asks for
them (``deferred.py``); at tens of millions of events that text is most of the Trace's
memory. :class:`PackedBatches` keeps each batch deflated by ISA-L at its fastest level
(some GB/s; Kineto's args shrink about tenfold) and inflates a batch when it is read.
Without ISA-L the batches stay as they are (zlib's deflate would cost the load more than
a few percent).

The first batches, up to ``raw_bytes`` of text together (the whole-file reader's
:data:`RAW_BYTES`), are kept as they are: a summary reads most batches of a trace of that
size (an op's shapes, a kernel's launch configuration), so deflating them at load and
inflating them again cost it more CPU (a tenth of a resnet50 summary's own work,
docs/benchmarks.md) than the few tens of MiB they hold; beyond it, memory grows by the
deflated size only. The chunked reader (``chunks.py``), whose memory is one chunk's,
keeps none raw.
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
#: the args text the whole-file reader keeps as it is, its first batches' (bytes)
RAW_BYTES = 32 << 20


class PackedBatches(Sequence[tuple[int, bytes]]):
    """(first row, ``[args, ...]`` text) of each batch, as a list of them reads, each
    batch's text deflated but the first ``raw_bytes`` of it; :attr:`bases` gives the first rows without inflating, and
    :attr:`names` each batch's arg names where the tokenizer found them (None: not known)."""

    def __init__(self, raw_bytes: int = 0) -> None:
        """``raw_bytes``: the text of the first batches kept as it is, at most this much."""
        self.bases: list[int] = []
        self.names: list[frozenset[str] | None] = []
        self._blobs: list[bytes] = []
        self._raw: list[bool] = []  # per batch: kept as it is
        self._room = raw_bytes  # what is left of raw_bytes

    def append(self, batch: tuple[int, bytes], names: frozenset[str] | None = None) -> None:
        base, text = batch
        self.bases.append(base)
        self.names.append(names)
        raw = isal_zlib is None or len(text) <= self._room
        self._room = self._room - len(text) if raw else 0  # after one deflated, every batch is
        self._raw.append(raw)
        self._blobs.append(text if isal_zlib is None or raw else isal_zlib.compress(text, 0))

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
        return self.bases[i], (blob if isal_zlib is None or self._raw[i] else isal_zlib.decompress(blob))

    def nbytes(self) -> int:
        """Bytes held (deflated, or as they are)."""
        return sum(map(len, self._blobs))


def bases(batches: Sequence[tuple[int, bytes]]) -> list[int]:
    """The first rows of batches (packed or a plain list), without inflating any."""
    return batches.bases if isinstance(batches, PackedBatches) else [b for b, _ in batches]
