"""torch.distributed's process groups as the session saw them: the ``distributedInfo``
torch.profiler's export carries (backend, rank, world_size, ``pg_count``, and
``pg_config``: each group the rank is in, with its name and global ranks), which
``analyze/process_groups.py`` reads to tell a subgroup's collectives from the world's
and to map a subgroup's root to its global rank.

torch reads it once, when a recording starts (``_KinetoProfile.start_trace``). The
plugin's own recording starts with the session, before the program's
``init_process_group``, and ends after its ``destroy_process_group``, which forgets
every group: read at either end, there is nothing (before, a ``polyprof run`` rank's
recording had no ``distributedInfo`` but the launcher's rank and world size). So the
plugin looks when a recording starts, just before every ``destroy_process_group``
(a gate on torch's function, put there once torch is imported and left there, as the
profiler gates of hooks.py) and when the session stops, and keeps every group it saw
(:func:`merged`)."""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from ...lowlevel import unseen
from ...trace import metadata_keys as mkeys

log = logging.getLogger("polyprof")

#: the modules whose ``destroy_process_group`` is gated (the name torch.distributed
#: re-exports, and c10d's own, which c10d's functions call)
_MODULES = ("torch.distributed.distributed_c10d", "torch.distributed")
_gate: list[Any] = []  # the one gate put on torch's destroy_process_group


def current() -> dict[str, Any] | None:
    """What torch.distributed knows now, as torch.profiler's export writes it
    (``_KinetoProfile._get_distributed_info``); None before ``init_process_group``,
    after ``destroy_process_group``, or where torch.distributed was never imported."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    c10d = dist.distributed_c10d
    info: dict[str, Any] = {"backend": str(dist.get_backend()), "rank": int(dist.get_rank()),
                            "world_size": int(dist.get_world_size())}
    count = getattr(dist, "get_pg_count", None)
    if count is not None:
        info["pg_count"] = int(count())
    configs = getattr(c10d, "_get_all_pg_configs", None)  # torch 2.2 on
    if configs is not None:
        info["pg_config"] = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in c.items()} for c in configs()]
    return info


def merged(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    """``new`` over ``old``: its scalars; the groups of both (``pg_config``, by
    ``pg_name``: those of ``old`` first, in the order made, a group in both as ``new``
    lists it); the larger ``pg_count``."""
    if not old or not new:
        one = new or old
        return dict(one) if one else None
    out = {**old, **new}
    groups: dict[str, Any] = {}
    for c in (old.get("pg_config") or []) + (new.get("pg_config") or []):
        if isinstance(c, dict):
            groups[str(c.get("pg_name"))] = c
    if groups:
        out["pg_config"] = list(groups.values())
    counts = [c for c in (old.get("pg_count"), new.get("pg_count")) if isinstance(c, int)]
    if counts:
        out["pg_count"] = max(counts)
    return out


class GroupsSeen:
    """The process groups seen during one session (:func:`current`, :func:`merged`)."""

    def __init__(self) -> None:
        self.info: dict[str, Any] | None = None

    def look(self) -> None:
        """Keep what torch.distributed knows now (a failure is logged, never raised)."""
        try:
            now = current()
        except Exception as e:  # torch's private helpers: without them, the groups are not known
            log.debug("plugin torch: process groups not read: %s: %s", type(e).__name__, e)
            return
        if now:
            self.info = merged(self.info, now)

    def apply(self, metadata: dict[str, Any]) -> None:
        """Put what was seen into a torch recording's metadata (its ``distributedInfo``,
        over the one torch wrote at the recording's start, and its rank, world size and
        backend, as the Kineto reader sets them)."""
        info = merged(metadata.get(mkeys.DISTRIBUTED_INFO) if isinstance(
            metadata.get(mkeys.DISTRIBUTED_INFO), dict) else None, self.info)
        if not info:
            return
        metadata[mkeys.DISTRIBUTED_INFO] = info
        for k in (mkeys.RANK, mkeys.WORLD_SIZE, mkeys.BACKEND):
            if k in info:
                metadata[k] = info[k]


def gate_destroy(before: Callable[[], None]) -> None:
    """Have torch call ``before`` ahead of every ``destroy_process_group`` (unseen by any
    profile function; an error in it is logged, never raised into the program). Put
    there once, where torch.distributed is imported; it stays for the process."""
    c10d = sys.modules.get(_MODULES[0])
    fn = getattr(c10d, "destroy_process_group", None)
    if fn is None:
        return
    if not _gate:
        def call(*_args: Any, **_kw: Any) -> None:
            try:
                before()
            except Exception as e:  # the program's destroy_process_group goes on anyway
                log.warning("plugin torch: reading the process groups failed: %s: %s", type(e).__name__, e)

        _gate.append(unseen.quiet(call, then=fn))
    for name in _MODULES:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "destroy_process_group", None) is fn:
            mod.destroy_process_group = _gate[0]  # type: ignore[attr-defined]
