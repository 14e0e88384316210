"""Kineto / Chrome trace JSON reader (what ``torch.profiler`` writes), ``.json`` or ``.json.gz``.

Built for big traces: the file is decompressed as a stream and the ``traceEvents`` array
is cut into slices of whole events; msgspec decodes each slice straight into small typed
structs (only the fields the reader uses; ``ts`` and ``dur`` kept as their JSON text), and
each slice becomes NumPy columns straight away, so the parsed JSON of the whole file never
exists at once. A slice that does not parse is mended on its own or refused at its
fault's byte, line and column of the file (``faults.py``). The other members of the
top-level object are read one at a time, a value over 16 MiB only scanned (``toplevel.py``);
only a document of at most 64 MiB with no events array is parsed in one piece.

Mapping to the Trace: host processes -> ``/host:CPU`` planes (thread tracks), devices ->
``/device:<KIND>:<N>`` planes (one track per stream), ``X``/``i``/``I``/``B``-``E`` ->
events, ``C`` -> counters, ``s``/``t``/``f`` -> flows bound to events, ``M`` -> names.
Times are Kineto's wall clock in ns (``baseTimeNanoseconds`` + ``ts`` µs, or absolute
µs), read from the digits of their text, so ns are exact.

The stages, one module each (Perfetto's tokenizer/parser split):

- ``stream.py``: the file as decompressed blocks (gzip streamed, ISA-L when installed);
- ``slicing.py``: the ``traceEvents`` array cut into slices of whole events, each read by
  the compiled tokenizer into columns (``tokenized.py`` + ``_tokens.c``, which also takes
  the args analyses look up by row: ``taken.py``), or decoded by
  msgspec into the structs of ``events.py`` where it does not read a slice exactly (a
  slice that does not parse mended by ``lenient.py`` or its fault placed in the file by
  ``faults.py``); the members around the array walked by ``toplevel.py``, a long value
  scanned by ``_skip.c``;
- ``collector.py``: each slice -> NumPy columns (codes through ``codes.py``, exact ns
  through ``numbers.py``, flow endpoints through ``flows.py``), args kept as JSON text
  with the correlation ids typed at load (``ids.py``, ``args.py``);
- ``build.py``: the Trace: planes and vendors (``devices.py``), tracks, B/E pairs, flows
  bound and chained (``flows.py``), counters, metadata; the args not typed at load are
  handed to the Trace's StatTable to decode on first use (``deferred.py``); two producers'
  traces get a pass after the build (``ascend.py``: Huawei Ascend's tasks by their task
  type; ``rocprof_v1.py``: rocprof v1's exact ns from the args);
- ``progress.py``: the progress bar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import TraceFormatError
from ...lowlevel.heap import collector_paused, reusing_freed_pages
from ...trace.core import Trace
from ..safety import check_events, clean_metadata, guarded
from . import slicing, tokenized
from .args import BY_ROW
from .collector import _Collector
from ..inflate import Decompressed
from .progress import _Progress
from .slicing import _event_slices

__all__ = ["load"]

#: files of this size or more are read with NumPy's large arrays made from freed pages
#: (``lowlevel.heap.reusing_freed_pages``): ~1M events, whose columns reach its block size
LARGE_FILE = 16 << 20


@guarded
def load(path: str | Path, progress: bool = False) -> Trace:
    """Read a Kineto / Chrome trace JSON file (``.json`` or ``.json.gz``) into a Trace."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    src_size = path.stat().st_size
    if src_size == 0:
        raise TraceFormatError(path, "empty file")
    bar = _Progress(progress, path, src_size)
    # parsed JSON makes no reference cycles: the cyclic GC would only re-scan the many
    # short-lived dicts of every slice; a big file's columns reuse the pages of those freed
    with collector_paused(), reusing_freed_pages(src_size >= LARGE_FILE):
        try:
            top: dict[str, Any] = {}
            col = _Collector(path)
            col.tok = tokenized.tokenizer()
            if col.tok is not None:  # the args analyses look up by row, taken as the events are read (taken.py)
                col.tok.take(BY_ROW)
            scan = col.tok.scan if col.tok is not None else None
            seen = 0
            for events in _event_slices(path, Decompressed(path, slicing.CHUNK_BYTES, bar.advance).blocks(), top, scan):
                if isinstance(events, tuple):  # tokenized in C
                    seen += events[0]
                    check_events(path, seen, so_far=True)
                    tokenized.add(col, events)
                else:
                    seen += len(events)
                    check_events(path, seen, so_far=True)
                    col.add(events)
                del events
            trace = col.finish(top, bar)
            clean_metadata(trace.metadata)
            return trace
        except MemoryError:
            raise TraceFormatError(path, "not enough memory to read this trace") from None
        except RecursionError:
            raise TraceFormatError(path, "invalid JSON: nested too deeply") from None
        finally:
            bar.stop()
