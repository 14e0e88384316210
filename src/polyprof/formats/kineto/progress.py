"""The progress bar of a load: rich, on stderr, only when asked for."""

from __future__ import annotations

from pathlib import Path

class _Progress:
    """A rich progress bar on stderr (parse by compressed bytes, then build steps)."""

    def __init__(self, enabled: bool, path: Path, total: int):
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, ProgressColumn,
                                   TextColumn, TimeElapsedColumn)

        class Amount(ProgressColumn):  # bytes while parsing, then "3/5" of a stage's steps
            def __init__(self) -> None:
                super().__init__()
                self.bytes, self.steps = DownloadColumn(), MofNCompleteColumn()

            def render(self, task):  # type: ignore[no-untyped-def]  # rich's Task
                return (self.bytes if task.fields.get("bytes", True) else self.steps).render(task)

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), Amount(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(f"decompress+parse {path.name}", total=total)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def stage(self, name: str, total: int, of_bytes: bool = False) -> None:
        """The bar begins stage ``name`` of ``total`` steps (``of_bytes``: bytes)."""
        if self.bar is not None:
            self.bar.update(self.task, description=name, completed=0, total=total, bytes=of_bytes)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

