"""Write BENCHMARKS.md from bench/results/*.json: every figure beside the command that produced it.

python -m bench.report
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from bench.common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["core", "ingest", "spark_read", "client"]
TITLES = {
    "core": "Core log (issue 2): writer and reader vs raw page-blob calls",
    "ingest": "Function App end to end (issue 3): HTTP ingest, staging, writer, read API",
    "spark_read": "Spark (issue 4): data source vs raw parallel range downloads",
    "client": "Python client (issue 6): producer and consumers",
}

HEADER = """# Benchmarks

Every figure below was printed by the command shown above its table, on this project's
machine kind (2 cores, 24 GiB, Azurite on loopback), and is copied here by
`python -m bench.report` from `bench/results/*.json`. Targets are ratios measured **in one
run** against the raw storage primitive on the same Azurite, because the machine is shared
and noisy: the raw baseline moved by up to 40% between runs while other jobs ran, and a ratio
cancels most of that. Lines marked `(>= x)` / `(<= x)` carry the target from the issue.

"""


def fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def main() -> None:
    parts = [HEADER, f"Python {platform.python_version()}, {platform.machine()}.\n"]
    names = [n for n in ORDER if (RESULTS / f"{n}.json").exists()]
    names += sorted(p.stem for p in RESULTS.glob("*.json") if p.stem not in ORDER)
    for name in names:
        doc = json.loads((RESULTS / f"{name}.json").read_text())
        parts.append(f"\n## {TITLES.get(name, name)}\n\n```bash\n{doc['command']}\n```\n\n")
        parts.append("| figure | value |\n|---|---|\n")
        parts += [f"| {k} | {fmt(v)} |\n" for k, v in doc["figures"].items()]
        if doc.get("notes"):
            parts.append(f"\n{doc['notes']}\n")
    (ROOT / "BENCHMARKS.md").write_text("".join(parts))
    print(f"wrote BENCHMARKS.md from {len(names)} result files")


if __name__ == "__main__":
    main()
