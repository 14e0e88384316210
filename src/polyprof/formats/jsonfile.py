"""Write a JSON document fast (orjson), gzipped when the file name ends in ``.gz``."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

from ..errors import PolyprofError


def _default(o: Any) -> Any:
    if isinstance(o, (bytes, bytearray, memoryview)):  # e.g. XSpace bytes stats: base64 text
        import base64

        return base64.b64encode(bytes(o)).decode("ascii")
    raise TypeError(f"Type is not JSON serializable: {type(o).__name__}")


#: the largest integer a JavaScript number (a trace viewer's, HTA's pandas float) holds
#: exactly: a thread or process id above it is renumbered in what is written for viewers
#: (JAX's hashed 64-bit thread ids)
EXACT_IN_JS = (1 << 53) - 1


def write_json(doc: Any, path: str | Path) -> Path:
    path = Path(path)
    try:
        data = orjson.dumps(doc, default=_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as e:  # values read from elsewhere: nesting beyond 254, ints beyond 64 bits
        raise PolyprofError(f"{path}: the trace holds values JSON cannot hold ({e})") from None
    if path.name.lower().endswith(".gz"):  # (T.JSON.GZ too, as the writers' registry reads names)
        # no file name in the gzip header: ``path`` may be a temporary file renamed after
        # (outfile.replacing), whose name ``gunzip -N`` would restore
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", compresslevel=5, fileobj=raw) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path
