"""The compiled readers against their Python/SQL fallbacks on one input, in process.

:func:`fallback` switches off, while it is open, every compiled helper a reader of
untrusted files uses (the SQLite page walk, the Kineto tokenizer, args grouping and
field gathering, the [memory] pass, the Perfetto walk, the XSpace decode): what ``POLYPROF_PURE_PYTHON=1`` does at import. :func:`fingerprint`
is a digest of what a trace holds (events, names, planes, tracks, stats, flows,
counters, metadata), equal for two traces that read the same.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Iterator

import numpy as np

_SWITCHES = (("polyprof.formats.sqlite_pages", "_sqlite_pages"), ("polyprof.formats.kineto.tokenized", "_tokens"),
             ("polyprof.formats.kineto.deferred", "_args"), ("polyprof.formats.kineto.gather", "_gather"),
             ("polyprof.formats.kineto.flows", "_nesting"), ("polyprof.formats.kineto_memory", "_kineto_memory"),
             ("polyprof.formats.perfetto_read.walked", "_walk"), ("polyprof.formats.xspace.decode", "_wire"))


@contextlib.contextmanager
def fallback() -> Iterator[None]:
    import importlib

    saved = []
    for mod, attr in _SWITCHES:
        m = importlib.import_module(mod)
        saved.append((m, attr, getattr(m, attr)))
        setattr(m, attr, None)
        if hasattr(m, "IMPLEMENTATION"):  # read at call time by some readers (perfetto_read.load)
            saved.append((m, "IMPLEMENTATION", m.IMPLEMENTATION))
            m.IMPLEMENTATION = "python"
    try:
        yield
    finally:
        for m, attr, v in saved:
            setattr(m, attr, v)


def fingerprint(trace: object) -> str:
    h = hashlib.sha256()

    def add(x: object) -> None:
        if isinstance(x, np.ndarray):
            h.update(str(x.dtype).encode())
            h.update(np.ascontiguousarray(x).tobytes() if x.dtype != object else repr(x.tolist()).encode())
        else:
            h.update(repr(x).encode())

    t: object = trace
    add(t.n_events)  # type: ignore[attr-defined]
    add(t.names().tolist())  # type: ignore[attr-defined]
    add(t.categories().tolist())  # type: ignore[attr-defined]
    for k in sorted(t.events):  # type: ignore[attr-defined]
        add(k)
        add(t.events[k])  # type: ignore[attr-defined]
    add([(p.name, p.kind, p.vendor, p.index, p.pid, p.properties) for p in t.planes])  # type: ignore[attr-defined]
    add([(x.plane, x.name, x.kind, x.tid, x.sort_index) for x in t.tracks])  # type: ignore[attr-defined]
    for k in sorted(t.stats):  # type: ignore[attr-defined]
        s = t.stats[k]  # type: ignore[attr-defined]
        add(k)
        add(s.rows)
        add(s.values.tolist())
    for table in ("flows", "counters"):
        cols = getattr(t, table)
        for k in sorted(cols):
            add((table, k))
            add([t.strings[i] for i in cols[k]] if k in ("name", "category") else cols[k])  # type: ignore[attr-defined]
    add(sorted((k, repr(v)) for k, v in t.metadata.items()))  # type: ignore[attr-defined]
    return h.hexdigest()[:16]
