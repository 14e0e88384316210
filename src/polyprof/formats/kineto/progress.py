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
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(f"decompress+parse {path.name}", total=total)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def stage(self, name: str, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=name, completed=0, total=total)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

