"""A trace's process groups, from Kineto's ``distributedInfo`` (``pg_config``: each group's
name, size and global ranks; ``world_size``): what a collective's own args leave out."""

from __future__ import annotations

import numpy as np

from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.sorting import unique


def group_ranks(trace: Trace) -> list[int] | None:
    """The global ranks of the trace's one process group (``distributedInfo.pg_config``),
    None when there are several (a c10d op's peer is then a rank of a group it does not
    name) or none are listed."""
    info = distributed_info(trace)
    pgs = info.get("pg_config") if info is not None else None
    if isinstance(pgs, list) and len(pgs) == 1 and isinstance(pgs[0], dict):
        ranks = pgs[0].get("ranks")
        if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
            return ranks
    return None


def distributed_info(trace: Trace) -> dict | None:
    """The trace's ``distributedInfo`` (Kineto's header), None where it has none."""
    info = trace.metadata.get(mkeys.DISTRIBUTED_INFO)
    if not isinstance(info, dict):
        torch_md = trace.metadata.get(mkeys.TORCH)
        info = torch_md.get(mkeys.DISTRIBUTED_INFO) if isinstance(torch_md, dict) else None
    return info if isinstance(info, dict) else None


def known_group_sizes(trace: Trace, group: np.ndarray, pg: np.ndarray) -> np.ndarray:
    """``group`` (each collective's ``Group size``, 0: not given) with the sizes
    ``distributedInfo`` gives where the row has none: its process group's ``pg_size``
    (by the ``Process Group Name`` it names), or, for a row naming none (gloo's
    ``gloo:all_reduce`` ranges), the size every listed group has, else the world size
    where no group is listed. Before, such rows were a group of 1 (bus bandwidth equal
    to the algorithm bandwidth)."""
    missing = np.flatnonzero(group <= 0)
    info = distributed_info(trace) if len(missing) else None
    if info is None:
        return group
    groups = info.get("pg_config")
    sizes = {str(c.get("pg_name")): int(c["pg_size"]) for c in (groups if isinstance(groups, list) else [])
             if isinstance(c, dict) and isinstance(c.get("pg_size"), int) and c["pg_size"] > 0}
    world = info.get("world_size")
    if sizes:
        one = set(sizes.values())
        unnamed = one.pop() if len(one) == 1 else 0
    else:
        unnamed = world if isinstance(world, int) and world > 0 else 0
    out = group.copy()
    for i in missing.tolist():
        name = pg[i]
        out[i] = sizes.get(str(name), 0) if name not in (None, "") else unnamed
    return out


#: the worker threads of each gloo process group torch.distributed makes: ProcessGroupGloo's
#: default options, which ``_new_process_group_helper`` leaves as they are (two per device:
#: one device unless ``GLOO_SOCKET_IFNAME`` names several interfaces)
GLOO_THREADS = 2
#: the name prefix of gloo's work ranges (``gloo:broadcast``), each on a worker thread of its group
GLOO_PREFIX = "gloo:"
#: gloo's ranges run on the calling thread, not a group's worker thread
GLOO_CALLER = ("gloo:send", "gloo:recv")
#: the name Kineto gives a gloo worker thread (``thread 10509 (pt_gloo_runloop)``)
GLOO_THREAD_NAME = "pt_gloo_runloop"


def listed_groups(trace: Trace) -> dict[str, list[int]]:
    """The process groups ``distributedInfo.pg_config`` lists (those the rank is in), by
    name (``pg_name``), with their global ranks, in the order listed (the order they were
    made); those without a name or a list of ranks left out."""
    info = distributed_info(trace)
    pgs = info.get("pg_config") if info is not None else None
    out: dict[str, list[int]] = {}
    for c in pgs if isinstance(pgs, list) else []:
        ranks = c.get("ranks") if isinstance(c, dict) else None
        if isinstance(c, dict) and c.get("pg_name") is not None and isinstance(ranks, list) \
                and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            out[str(c["pg_name"])] = ranks
    return out


def group_count(trace: Trace) -> int:
    """How many process groups the job made (``distributedInfo.pg_count``; 0: not given).
    ``pg_config`` lists only those the rank is in."""
    info = distributed_info(trace)
    n = info.get("pg_count") if info is not None else None
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def own_rank(trace: Trace) -> int | None:
    """The trace's global rank (``distributedInfo.rank``), None where not given."""
    info = distributed_info(trace)
    r = info.get("rank") if info is not None else None
    return r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else None


def gloo_workers(trace: Trace) -> np.ndarray:
    """Per track (by id), whether it is a gloo worker thread: named so (``pt_gloo_runloop``;
    Kineto may name one thread twice, ``python`` and ``pt_gloo_runloop``, and a track keeps
    one), or running nothing but gloo's work ranges. The thread that calls c10d is none: it
    runs the c10d ops, and gloo's ``gloo:send`` / ``gloo:recv`` ranges (:data:`GLOO_CALLER`)."""
    work = np.fromiter((s.startswith(GLOO_PREFIX) and s not in GLOO_CALLER for s in trace.strings), bool,
                       len(trace.strings))  # per string, not per event
    ev = trace.events
    other = np.bincount(ev["track"], weights=~work[ev["name"]], minlength=len(trace.tracks)) \
        if trace.n_events else np.zeros(len(trace.tracks))
    out = np.zeros(max(len(trace.tracks), len(other)), bool)
    for tr in trace.tracks:  # per track (a few)
        out[tr.id] = GLOO_THREAD_NAME in tr.name or other[tr.id] == 0
    return out


def gloo_groups(trace: Trace, rows: np.ndarray, names: np.ndarray, pg: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pg, world, unsure) for collective rows (``names``: their event names; ``pg``: their
    ``Process Group Name``, None where not given). gloo's work ranges name no group; the
    thread each ran on does: a gloo process group runs its work on threads of its own
    (:data:`GLOO_THREADS`, :func:`gloo_workers`), made when the group was made, and a rank
    makes a group only where it is in it. So where the job made several groups
    (``pg_count``, or several listed), a rank in one (``pg_config`` lists those the rank is
    in) ran all its gloo work in that one; a rank in several, on ``GLOO_THREADS`` worker
    threads per group (each group's seen working), ran each group's on the next worker
    threads in thread-id order (ids are handed out in the order threads are made; the
    groups are listed in the order made; a worker's id below its process's: the ids wrapped
    at ``pid_max`` since, and the order is not told). ``gloo:send`` / ``gloo:recv`` run on
    the calling thread, which tells no group: they are given none (the bare op's key).
    ``pg`` gets those names; ``world``: the rows told to be the default group's (listed
    first: the group made first), whose key stays the bare op, as that of a collective
    whose group is not told (a subgroup's is ``group/op``; so ranks that tell and ranks
    that cannot still match the world's). ``unsure``: the gloo rows on worker threads whose
    group the trace does not tell although the rank worked in several groups (several
    listed and not told apart; or, none listed, more worker threads than one group has):
    their root, a rank of that group, cannot be mapped to the global rank."""
    pg = pg.copy()
    unsure, world = np.zeros(len(rows), bool), np.zeros(len(rows), bool)
    mine = np.flatnonzero(np.char.startswith(np.asarray(names, str), GLOO_PREFIX) & (pg == None)) \
        if len(rows) else np.zeros(0, np.int64)  # noqa: E711
    if len(mine):
        mine = mine[gloo_workers(trace)[trace.events["track"][rows[mine]]]]
    if not len(mine):
        return pg, world, unsure
    groups, rank = listed_groups(trace), own_rank(trace)
    tracks = np.asarray(trace.events["track"][rows[mine]], np.int64)
    tid, plane = np.zeros(len(trace.tracks), np.int64), np.zeros(len(trace.tracks), np.int64)
    for tr in trace.tracks:  # per track (a few), by its id
        tid[tr.id], plane[tr.id] = tr.tid, tr.plane
    tid, plane = tid[tracks], plane[tracks]
    threads = unique(tid)
    if not groups or (len(groups) == 1 and group_count(trace) < 2):  # the job made one group, or none listed
        unsure[mine] = not groups and len(threads) > GLOO_THREADS
        return pg, world, unsure
    member = [n for n, ranks in groups.items() if rank is not None and rank in ranks]
    planes = unique(plane)
    pid = next((p.pid for p in trace.planes if len(planes) == 1 and p.id == planes[0]), 0)
    if len(member) == 1:
        pg[mine] = member[0]
    elif member and len(planes) == 1 and len(threads) == GLOO_THREADS * len(member) and threads.min() > max(pid, 0):
        pg[mine] = np.asarray(member, object)[np.searchsorted(threads, tid) // GLOO_THREADS]
    else:
        unsure[mine] = True
    world[mine] = pg[mine] == next(iter(groups))
    return pg, world, unsure
