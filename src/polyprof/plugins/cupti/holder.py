"""Who holds CUPTI in this process (CUPTI takes one subscriber at a time).

The cupti plugin sets it while it records; the torch plugin asks (``holds_cupti()``)
and then leaves CUDA activity to it, so every kernel is recorded once. Importing this
module imports nothing else (the torch plugin asks on every torch start).
"""

from __future__ import annotations

_holder: str | None = None


def holds_cupti() -> bool:
    """True while polyprof's cupti plugin records device activity in this process."""
    return _holder is not None


def set_holder(name: str | None) -> None:
    global _holder
    _holder = name
