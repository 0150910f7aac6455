"""Helpers shared by the benchmarks: timing, a results table, and writing results as JSON."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
MIB = 1024 * 1024


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_of(runs: int, fn: Callable[[], Any]) -> float:
    return statistics.median(timed(fn) for _ in range(runs))


def report(name: str, command: str, figures: dict[str, Any]) -> None:
    """Print the figures as a table and keep them in bench/results/NAME.json."""
    width = max(len(k) for k in figures)
    print(f"\n{name}  ({command})")
    for key, value in figures.items():
        shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {shown}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(
        json.dumps({"command": command, "figures": figures}, indent=2) + "\n"
    )
