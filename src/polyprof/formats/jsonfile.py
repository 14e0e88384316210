"""Write a JSON document fast (orjson), gzipped when the file name ends in ``.gz``."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson


def write_json(doc: Any, path: str | Path) -> Path:
    path = Path(path)
    data = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=5) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path
