"""Which rank is the root of a rooted collective (broadcast, scatter, reduce, gather), from
what the trace records: the ``root`` column of ``analyze/collectives.py``'s table.

A rooted collective binds its ranks one way only: a broadcast's (a scatter's) root may
finish before a receiver begins (it sends and is done; gloo and NCCL send eagerly), and
a receiver cannot end before the root began; a reduce's (a gather's) senders may finish
before the root begins, and the root cannot end before each sender began. So clock
alignment and the waits of stragglers need the root (``ranks/align.py``).

Where the root is written:

- ``Rank`` in the comms args of ``record_param_comms`` (which Kineto may copy onto the
  kernel): PyTorch's ``RECORD_PARAM_COMMS`` takes ``opts.rootRank`` there for
  broadcast, reduce, gather and scatter (ProcessGroupNCCL, recent PyTorch; older traces
  lack the arg), a rank of the process group, mapped through ``Process Group Ranks``;
- the c10d op that posted the collective, with ``record_shapes`` (its ``Concrete
  Inputs``): ``c10d::broadcast_(tensors, group, root_rank, root_tensor, ...)``,
  ``c10d::reduce_(tensors, group, op, root_rank, ...)``, ``c10d::gather_(outputs,
  inputs, group, root_rank, ...)``, ``c10d::scatter_(outputs, inputs, group, root_rank,
  ...)``: the k-th such op of a kind is paired with the k-th collective of that kind in
  time order (gloo runs the work on a worker thread of its own; one c10d op posts one
  collective), or, where the counts differ, the one root they all name.

A group rank is mapped to the global rank through the collective's ``Process Group
Ranks`` where listed, else the ranks ``distributedInfo`` lists for the group it names
(``Process Group Name``; for gloo's ranges, which name none, the group whose worker
threads ran it: ``process_groups.gloo_groups``), else the trace's one process group.
Where the trace lists several groups and the collective's is not told, the root is the
global rank every group it may be in (the rank's own groups) maps it to, -1 where they
disagree; where none are listed it is taken as the global rank (right for the default
group), unless the rank's gloo work ran in several groups (-1). -1: unknown. Before, a
subgroup's root was read as that global rank: gloo's ``c10d::broadcast_(..., src=3,
group=[1, 3])`` names root 1.
"""

from __future__ import annotations

import numpy as np

from ..trace import keys
from ..trace.core import Trace
from ..trace.sorting import unique, unique_inverse
from .process_groups import group_ranks, listed_groups, own_rank

#: the root sends to every other rank: a receiver cannot end before the root began
ROOT_SENDS = frozenset({"broadcast", "scatter"})
#: every other rank sends to the root: the root cannot end before each sender began
ROOT_RECEIVES = frozenset({"reduce", "gather"})
ROOTED = ROOT_SENDS | ROOT_RECEIVES
#: each rank hears from one peer (XLA's collective-permute: its source-target pairs are
#: not in the trace): no bound between two ranks
UNBOUND = frozenset({"collectivepermute"})
#: the position of ``root_rank`` in the c10d op's inputs, by collective
C10D_ROOT_INPUT = {"broadcast": 2, "reduce": 3, "gather": 3, "scatter": 3}


def json_arg(x: object) -> object:
    """An arg that may be JSON text (``Input Dims``, ``Process Group Ranks``) decoded;
    None where it is not JSON; anything else as it is."""
    if isinstance(x, (str, bytes)):
        import orjson  # here: a trace without collectives' JSON args (a summary's) imports no JSON library

        try:
            return orjson.loads(x)
        except orjson.JSONDecodeError:
            return None
    return x


def _int(x: object) -> int:
    try:
        return int(x)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return -1


def _global(root: int, groups: list[list[int]] | None) -> int:
    """The global rank of group rank ``root``: as it is where ``groups`` is None (no group
    known: the default group's); else the one global rank every group of ``groups`` (the
    ones the collective may be in; one too small to have that rank is not its) maps it to,
    -1 where they disagree or none has it."""
    if groups is None or root < 0:
        return root
    got = {g[root] for g in groups if root < len(g)}
    return int(got.pop()) if len(got) == 1 else -1


def _groups(trace: Trace, n: int, st: dict[str, np.ndarray], unsure: np.ndarray | None
            ) -> list[list[list[int]] | None]:
    """Per row, the groups its collective may be in (see :func:`_global`): its listed
    ``Process Group Ranks``; else the listed group its ``Process Group Name`` names; else
    the trace's one group; else, several listed, those the rank is in (every listed one
    where the rank is not given); else (none listed) [] for an ``unsure`` row and None."""
    listed, names = st.get("Process Group Ranks"), st.get("Process Group Name")
    by_name, default, rank = listed_groups(trace), group_ranks(trace), own_rank(trace)
    mine = [g for g in by_name.values() if rank is None or rank in g]
    out: list[list[list[int]] | None] = []
    for i in range(n):
        ranks = json_arg(listed[i]) if listed is not None else None
        name = names[i] if names is not None else None
        if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
            out.append([ranks])
        elif name is not None and str(name) in by_name:
            out.append([by_name[str(name)]])
        elif default is not None:
            out.append([default])
        elif by_name:
            out.append(mine)
        else:
            out.append([] if unsure is not None and unsure[i] else None)
    return out


def roots(trace: Trace, rows: np.ndarray, ops: np.ndarray, start: np.ndarray, st: dict[str, np.ndarray],
          enclosing: np.ndarray, unsure: np.ndarray | None = None) -> np.ndarray:
    """The global root rank of each collective row (-1: unknown, or not rooted).
    ``ops``: the rows' collectives (normalised); ``start``: their start times; ``st``:
    their comms args (``Rank``, ``Process Group Ranks``, ``Process Group Name``);
    ``enclosing``: the row of the host op that made a point-to-point row this collective
    (-1: none); ``unsure``: the rows whose group the trace does not tell though the rank
    worked in several (``process_groups.gloo_groups``)."""
    out = np.full(len(rows), -1, np.int64)
    rooted = np.flatnonzero(np.isin(ops, list(ROOTED))) if len(rows) else np.zeros(0, np.int64)
    if not len(rooted):
        return out
    group = np.full(len(rows), -1, np.int64)  # the group rank of the root, as the trace names it
    for i in rooted.tolist():
        group[i] = _int(st["Rank"][i]) if st.get("Rank") is not None else -1
    ask = rooted[group[rooted] < 0]
    wrapped = ask[enclosing[ask] >= 0]  # an enclosing c10d::gather_ / scatter_: its own root
    if len(wrapped):
        group[wrapped] = _c10d_roots(trace, enclosing[wrapped], ops[wrapped])
    for op in sorted(set(ops[rooted].tolist())):
        mine = rooted[(ops[rooted] == op) & (group[rooted] < 0) & (enclosing[rooted] < 0)]
        if len(mine):
            group[mine] = _posted_roots(trace, op, start[mine])
    found = rooted[group[rooted] >= 0]
    if len(found):
        groups = _groups(trace, len(found), {k: v[found] for k, v in st.items() if v is not None},
                         unsure[found] if unsure is not None else None)
        out[found] = [_global(int(g), c) for g, c in zip(group[found].tolist(), groups)]
    return out


def _c10d_roots(trace: Trace, ops_rows: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """The ``root_rank`` input of c10d op rows (-1: not one of the rooted c10d ops, or
    its inputs not recorded)."""
    out = np.full(len(ops_rows), -1, np.int64)
    uniq, back = unique_inverse(np.asarray(ops_rows, np.int64))
    got = trace.stats.lookup_rows((keys.CONCRETE_INPUTS,), uniq) if len(uniq) else {}
    inputs = np.full(len(uniq), None, object)
    if keys.CONCRETE_INPUTS in got:
        m, v = got[keys.CONCRETE_INPUTS]
        inputs[m] = list(v)
    names = trace.names(uniq)
    for k, (name, op) in enumerate(zip(names[back].tolist(), ops.tolist())):
        args = json_arg(inputs[back[k]])
        at = C10D_ROOT_INPUT.get(op, -1)
        if str(name) == f"c10d::{op}_" and isinstance(args, list) and 0 <= at < len(args):
            out[k] = _int(args[at])
    return out


def _posted_roots(trace: Trace, op: str, start: np.ndarray) -> np.ndarray:
    """Roots of one kind's collectives (``start``: their start times) from the c10d ops
    that posted them (``c10d::broadcast_``...): the k-th op with the k-th collective in
    time order where the counts agree and each op began before its collective; else, for
    every collective, the one root all the ops name; -1 where neither says."""
    sid = trace.string_id(f"c10d::{op}_")
    out = np.full(len(start), -1, np.int64)
    if sid < 0:
        return out
    posts = np.flatnonzero(np.asarray(trace.events["name"]) == sid)
    if not len(posts):
        return out
    posts = posts[np.argsort(np.asarray(trace.events["start_ns"][posts]), kind="stable")]
    root = _c10d_roots(trace, posts, np.full(len(posts), op, object))
    order = np.argsort(start, kind="stable")
    if len(posts) == len(start) and (np.asarray(trace.events["start_ns"][posts]) <= start[order]).all():
        out[order] = root
        return out
    named = unique(root)
    if len(named) == 1 and named[0] >= 0:
        out[:] = named[0]
    return out
