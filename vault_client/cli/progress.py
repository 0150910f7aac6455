"""Progress bars (rich, on stderr) and the human-readable figures of the summaries."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)


def progress_bar(quiet: bool) -> Progress:
    """A bar counting bytes (and messages, in the ``messages`` field of each task).

    Shown only on a terminal: in a pipe or a log file a live bar is noise, and the summary
    line says the same at the end.
    """
    console = Console(stderr=True)
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TextColumn("{task.fields[messages]:,} msgs"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=False,
    )


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
