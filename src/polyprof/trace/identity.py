"""Who a trace came from: fill a source's identity from what its metadata says.

Readers and live sessions record different things: Kineto JSON has ``distributedInfo``
(rank, world size, process groups), XSpace has ``hostnames``, a live session knows its
host, pid, wall anchor and (under torchrun and friends) its ``RANK``. One function
turns any of them into the trace's single source (``Trace.sources[0]``), so merging and
the multi-rank analyses can tell ranks apart without knowing the format.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from .core import Trace
from . import metadata_keys as mkeys

def hostname() -> str:
    """This machine's host name: ``socket.gethostname()``, which on POSIX is the
    ``uname`` node name (read here without importing socket, a cost for a short run)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


#: (rank, world size) variables of the launchers, in order of trust: torchrun, Open MPI,
#: MPICH / Intel MPI, SLURM
LAUNCHER_VARIABLES = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                      ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))
#: environment variables launchers set to the process's global rank, in order of trust
RANK_ENV = tuple(rank for rank, _ in LAUNCHER_VARIABLES)


def rank_of(metadata: dict[str, Any]) -> int | None:
    """The rank a trace's metadata names (``distributedInfo.rank``), or None."""
    info = metadata.get(mkeys.DISTRIBUTED_INFO)
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            return r
    return None


def rank_from_env(env: Mapping[str, str] | None = None) -> int | None:
    found: Mapping[str, str] = os.environ if env is None else env
    for k in RANK_ENV:
        v = found.get(k, "")
        if v.isdigit():
            return int(v)
    return None


def launcher_rank(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(rank, world size) a launcher set (torchrun, MPI, SLURM: :data:`LAUNCHER_VARIABLES`,
    the first pair set), or None outside one."""
    found: Mapping[str, str] = os.environ if env is None else env
    for rank, size in LAUNCHER_VARIABLES:
        r, n = found.get(rank, ""), found.get(size, "")
        if r.isdigit() and n.isdigit():
            return int(r), int(n)
    return None


def identify(trace: Trace, label: str = "", host: str = "", pid: int = 0, rank: int | None = None) -> Trace:
    """Fill the identity of a single-source trace (in place) from the arguments and its
    metadata; what is already set is kept. A trace of several sources is left alone."""
    if len(trace.sources) != 1:
        return trace
    s = trace.sources[0]
    md = trace.metadata
    got = md.get(mkeys.SESSION)
    session: dict[str, Any] = got if isinstance(got, dict) else {}
    if s.rank is None:
        s.rank = rank if rank is not None else rank_of(md)
        if s.rank is None and isinstance(session.get("rank"), int):
            s.rank = session["rank"]
    if not s.host:
        hosts = md.get(mkeys.XSPACE, {}).get("hostnames") if isinstance(md.get(mkeys.XSPACE), dict) else None
        s.host = host or str(session.get("hostname") or (hosts[0] if hosts else ""))
    if not s.pid:
        s.pid = int(pid or session.get("pid") or 0)
    if not s.label:
        s.label = label
    anchor = md.get(mkeys.SOURCE_WALL_ANCHOR)
    if isinstance(anchor, dict) and "wall_ns" in anchor:
        s.clock.setdefault("wall_anchor", dict(anchor))
    domain = session.get("clock_domain")
    if isinstance(domain, str) and domain and md.get(mkeys.CLOCK_NAME) == mkeys.REFERENCE_CLOCK:
        s.clock.setdefault(mkeys.SOURCE_CLOCK_DOMAIN, domain)  # the times are still that monotonic clock's
    return trace
