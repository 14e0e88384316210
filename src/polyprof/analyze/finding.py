"""One finding (a rule's verdict on a trace, with its evidence and the events that show
it) and its rows as plain records: what every rule module builds on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..trace.model import FACTORY, Props, Record
from .frames import column

if TYPE_CHECKING:
    from .table import Table


@dataclass(init=False, repr=False, eq=False)  # its __init__ below; __repr__, __eq__ trace.model.Record's
class Finding(Record):
    """One finding: what was found, how bad, on which plane, the evidence and events
    that show it, and what to try. (Its own docstring: a dataclass without one has its
    signature written into ``__doc__`` through ``inspect`` at import.)"""

    id: str  # host_bound, input_bound, ..., memory_peak_held_by_one, memory_growth
    title: str
    severity: str  # "high" | "medium" | "low"
    plane: str
    evidence: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    suggestion: str = ""

    def __init__(self, id: str, title: str, severity: str, plane: str, evidence: Props,
                 events: list[Props] = FACTORY, suggestion: str = "") -> None:
        self.id, self.title, self.severity, self.plane, self.evidence = id, title, severity, plane, evidence
        self.events = [] if events is FACTORY else events
        self.suggestion = suggestion

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _records(df: Table, cols: list[str], n: int = 5, at: np.ndarray | None = None) -> list[dict[str, Any]]:
    """The first ``n`` rows of ``cols`` (of the rows ``at``, in that order, if given) as
    plain dicts, column by column (``itertuples`` makes a namedtuple class and
    ``df[cols]`` an Arrow label index, per call)."""
    take = slice(None, n) if at is None else at[:n]
    values = [[v.item() if hasattr(v, "item") else v for v in column(df, c)[take].tolist()] for c in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


#: a finding's main number where it is not its ``share_pct``: the evidence key, and -1
#: where a smaller number is worse (what picks the worst rank, or window, among those of a severity)
MAIN_NUMBER = {"host_bound": ("idle_pct", 1), "launch_bound": ("short_kernel_pct", 1),
                "memory_growth": ("rising_pct", 1), "low_mfu": ("mfu_pct", -1)}


def main_number(f: Finding) -> float:
    """How bad ``f`` is within its severity, larger is worse: the share its title gives
    (exposed communication: of the span), else its first ``*_pct``, else 0."""
    ev = f.evidence
    if f.id == "exposed_communication" and ev.get("span_ns"):
        return (float(ev.get("communication_ns", 0)) - float(ev.get("overlap_ns", 0))) / float(ev["span_ns"])
    key, sign = MAIN_NUMBER.get(f.id, ("share_pct", 1))
    if key not in ev:
        key, sign = next((k for k, v in ev.items() if k.endswith("_pct") and isinstance(v, (int, float))), ""), 1
    v = ev.get(key)
    return sign * float(v) if isinstance(v, (int, float)) and v == v else 0.0
