"""The CPU time of child processes that ended while a session recorded.

A session records its own process: the work of multiprocessing pools, Dask's worker
processes, DataLoader workers and subprocesses is not in its trace. Where such children
did more work than the process itself, the trace says so (a warning and
``session.children_cpu_s``), so an empty or idle trace is not read as an idle program.
The kernel counts a child's CPU time once the child has ended and been waited for
(``getrusage(RUSAGE_CHILDREN)``); children still running at the stop are not counted.
"""

from __future__ import annotations

try:
    import resource
except ImportError:  # not on Windows: nothing is said there
    resource = None  # type: ignore[assignment]

#: below this many CPU seconds in children nothing is said
MIN_CHILDREN_S = 0.5


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class ChildrenCPU:
    """CPU seconds of this process and of its ended children since it was made."""

    def __init__(self) -> None:
        self._start = None if resource is None else (_cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN))

    def since(self) -> tuple[float, float] | None:
        """(this process's, its ended children's) CPU seconds since the start."""
        if self._start is None:
            return None
        return (_cpu(resource.RUSAGE_SELF) - self._start[0], _cpu(resource.RUSAGE_CHILDREN) - self._start[1])

    def warning(self, recorded: bool = True) -> str | None:
        """What the trace should say, or None when the children did little: less than
        :data:`MIN_CHILDREN_S`, or less than this process where its trace ``recorded``
        anything (an empty trace says so at any share: forked workers' torch work beside
        a parent that mostly imported)."""
        got = self.since()
        if got is None:
            return None
        own, children = got
        if children < MIN_CHILDREN_S or (recorded and children < own):
            return None
        return (f"{children:.1f} s of CPU ran in child processes that ended during the session (this process: "
                f"{own:.1f} s): multiprocessing or Dask workers, DataLoader workers, subprocesses; their work "
                "is not in this trace, which records this process only (profile a worker with polyprof.profile() "
                "in it, or run the child under polyprof run)")
