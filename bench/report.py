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

NOTES = {
    "core": (
        "All four targets are met. Ratios are medians of five rounds of back-to-back raw/ours runs. "
        "The writer is handed four ~4 MiB batches per append, as the writer "
        "function hands over what it drained; one batch per call is shown too. Peak RSS is the child "
        "process's `VmHWM` (not `ru_maxrss`, which Linux carries across `exec`)."
    ),
    "ingest": (
        "Read API / raw is **not reliably met**: 0.468 in this run, 0.49-0.67 in earlier runs of the "
        "same code (one 4 MiB GET, CRC checks and JSON per request vs a bare 4 MiB GET). **Not met** on this "
        "machine: ingest msgs/s (target 100x raw "
        "`send_message`) and large-batch MiB/s (target 0.5 of raw `upload_page`). Why: the local host is "
        "one Python process (HTTP tier and writer share one GIL) beside a single-process Azurite on 2 "
        "cores, and both are saturated (py-spy: the host is mostly waiting on Azurite sockets). A "
        "claim-check batch crosses Azurite three times (blob upload, blob download, page write), which "
        "keeps large-batch ingest well below one raw `upload_page` stream on a single Azurite "
        "(0.35-0.40 measured). "
        "In Azure the HTTP tier, the writer instances and the storage accounts scale apart. The ingest "
        "figures are steady state: each stream gets one committed warm-up batch first, because idle "
        "queue pollers back off to `maxPollingInterval` (2 s), which also sets the p99 latency."
    ),
    "spark_read": (
        "**Not met**: Spark `count()` reads at about 0.4 of plain parallel range downloads (target 0.7). "
        "On 2 cores the read is CPU-bound: Azurite and the JVM alone need ~2.3 CPU-s for this read "
        "(a ceiling near 0.78 even if Python cost nothing); the Python workers add ~2 CPU-s for HTTP, "
        "CRC checks and Arrow columns. The in-memory source row shows Spark's own cost of taking rows "
        "from any Python data source."
    ),
    "client": "Both targets met. The producer ratio is the median of back-to-back paired runs.",
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
        if name in NOTES:
            parts.append(f"\n{NOTES[name]}\n")
    (ROOT / "BENCHMARKS.md").write_text("".join(parts))
    print(f"wrote BENCHMARKS.md from {len(names)} result files")


if __name__ == "__main__":
    main()
