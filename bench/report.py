"""Write BENCHMARKS.md from bench/BENCHMARKS.template.md and bench/results/*.json.

    ./dev bench report          (python -m bench.report)

The template holds the prose; each ``{{ results: NAME }}`` line becomes the command that
produced bench/results/NAME.json, its figures, and the commit, date and machine they were
measured on. ``{{ platform }}`` is the Python and architecture of this run. Result files the
template does not place are added at the end under their own names.
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT

TEMPLATE = Path(__file__).parent / "BENCHMARKS.template.md"
OUTPUT = ROOT / "BENCHMARKS.md"
PLACEHOLDER = re.compile(r"^\{\{\s*(platform|results:\s*(\w+))\s*\}\}$")
GENERATED = (
    "<!-- Written by ./dev bench report from bench/BENCHMARKS.template.md (the prose) and "
    "bench/results/*.json (the figures): edit those, then run it. -->\n"
)


def fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def provenance_line(recorded: dict[str, Any] | None) -> str:
    """One line saying where the figures come from; result files written before the
    benchmarks recorded it say so."""
    if not recorded:
        return "Commit, date and machine: not recorded."
    machine = recorded.get("machine", {})
    cpu = f"{machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', 'unknown model')})"
    memory = f", {machine['memory_gib']} GiB" if machine.get("memory_gib") else ""
    commit = recorded.get("commit") or "unknown"
    if commit.endswith("+"):
        commit = f"{commit[:-1]} with uncommitted changes"
    return (
        f"Commit {commit}, {recorded.get('date', 'date unknown')}, {cpu}{memory}, "
        f"Python {machine.get('python', '?')}."
    )


def results_block(name: str) -> str:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return f"No results yet: `./dev bench {name}` writes `bench/results/{name}.json`.\n"
    doc = json.loads(path.read_text())
    rows = "".join(f"| {k} | {fmt(v)} |\n" for k, v in doc["figures"].items())
    return (
        f"```bash\n{doc['command']}\n```\n\n| figure | value |\n|---|---|\n{rows}\n"
        f"{provenance_line(doc.get('recorded'))}\n"
    )


def render(template: str) -> str:
    placed: list[str] = []
    lines: list[str] = []
    for line in template.splitlines(keepends=True):
        match = PLACEHOLDER.match(line.strip())
        if not match:
            lines.append(line)
        elif match[2]:
            placed.append(match[2])
            lines.append(results_block(match[2]))
        else:
            lines.append(f"Python {platform.python_version()}, {platform.machine()}.\n")
    for name in sorted(p.stem for p in RESULTS.glob("*.json") if p.stem not in placed):
        lines.append(f"\n## {name}\n\n{results_block(name)}")
    return GENERATED + "".join(lines)


def main() -> None:
    OUTPUT.write_text(render(TEMPLATE.read_text()))
    print(f"wrote {OUTPUT.name} from {TEMPLATE.name} and {len(list(RESULTS.glob('*.json')))} result files")


if __name__ == "__main__":
    main()
