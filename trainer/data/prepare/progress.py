"""The progress bar of `data prepare` (rich): stored bytes read of the total, tokens so far."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress


class Progress:
    def __init__(self, total_bytes: int, enabled: bool = True) -> None:
        console = Console(stderr=True)
        self._bar = RichProgress(
            TextColumn("data prepare"),
            BarColumn(),
            TaskProgressColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TextColumn("{task.fields[tokens]:,} tokens"),
            TimeRemainingColumn(),
            console=console,
            disable=not (enabled and console.is_terminal),
            transient=True,
        )
        self._task = self._bar.add_task("prepare", total=total_bytes, tokens=0)
        self._tokens = 0

    def read(self, stored_bytes: int) -> None:
        self._bar.advance(self._task, max(0, stored_bytes))

    def tokens(self, count: int) -> None:
        self._tokens += count
        self._bar.update(self._task, tokens=self._tokens)

    def __enter__(self) -> Progress:
        self._bar.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.stop()
