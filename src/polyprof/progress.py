"""A progress bar over a count of tasks (ranks, files): rich on stderr when it is a
terminal, else a log line per task, so scripts and CI neither see escape codes nor pay
for importing rich."""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("polyprof")


class TaskBar:
    """``with TaskBar(total, what) as bar: ... bar.advance()``."""

    def __init__(self, total: int, what: str, single: bool = False):
        """``single``: a bar for one task too (its elapsed time; a long conversion)."""
        self.total, self.what, self.done, self.bar = total, what, 0, None
        if sys.stderr.isatty() and (total > 1 or (single and total == 1)):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(what, total=total)

    def __enter__(self) -> "TaskBar":
        if self.bar is not None:
            self.bar.start()
        return self

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
        else:
            log.info("%s: %d/%d", self.what, self.done, self.total)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
