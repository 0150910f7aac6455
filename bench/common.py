"""Helpers shared by the benchmarks: timing, a results table, and writing results as JSON."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
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


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` line of ``/proc/PID/status``, such as ``VmRSS`` or ``VmHWM`` (the peak RSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak(pid: int) -> None:
    """Reset a process's peak resident memory (``VmHWM``) to its current resident size."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def median_of(runs: int, fn: Callable[[], Any]) -> float:
    return statistics.median(timed(fn) for _ in range(runs))


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1)
    except (ValueError, OSError, AttributeError):
        return None


def provenance() -> dict[str, Any]:
    """What a figure was measured on: the commit (``+`` when the work tree had uncommitted
    changes), when, and the machine, since the same benchmark moves with the machine."""
    commit = _git("rev-parse", "--short=12", "HEAD")
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
        commit += "+"
    return {
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "memory_gib": _memory_gib(),
            "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}",
        },
    }


def report(name: str, command: str, figures: dict[str, Any]) -> None:
    """Print the figures as a table and keep them, with their provenance, in bench/results/NAME.json."""
    width = max(len(k) for k in figures)
    print(f"\n{name}  ({command})")
    for key, value in figures.items():
        shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {shown}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(
        json.dumps({"command": command, "recorded": provenance(), "figures": figures}, indent=2) + "\n"
    )
