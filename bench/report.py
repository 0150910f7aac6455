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
        "Ratios are medians of five rounds of back-to-back raw/ours runs. The writer is handed four "
        "~4 MiB batches per append, as the writer function hands over what it drained; one batch per "
        "call is shown too. Peak RSS is the child process's `VmHWM` (not `ru_maxrss`, which Linux "
        "carries across `exec`). The scan ratio is **below its 0.8 target since the storage clients "
        "read responses in 256 KiB blocks instead of the SDK's 4 KiB**: that change made the raw "
        "4 MiB range reads about 2.2x faster (115 to 255 MiB/s) and the scan about 1.8x faster "
        "(99 to 180 MiB/s), so the scan is now bound by decoding and checking records in Python, "
        "not by the network; the faster, lower ratio was kept."
    ),
    "ingest": (
        "Each figure is the median of three paired rounds (raw primitive, then ours, back to back) on "
        "one disk-backed Azurite, with the local host running 2 language-worker processes "
        "(`FUNCTIONS_WORKER_PROCESS_COUNT`). **Met**: 100 B ingest, over 100x a plain `send_message` "
        "loop in five of six full runs on this session's code (95.6x to 137x: the raw loop itself "
        "moves by a third between runs; the 4-sender loop is shown too, for transparency). **Not met, "
        "and not reachable on one Azurite**: the `Azurite CPU` rows show why. Azurite is one Node "
        "process, so it can give at most one core. Ingesting 1,000 x 1 KiB messages costs it about "
        "46 ms of CPU (page writes, claim-check upload and download, queue and table calls), which "
        "caps any ingest through it near 21,500 msgs/s, about 52x raw `send_message`; the measured "
        "rate sits at that ceiling. For large batches, Azurite's CPU per MiB of raw `upload_page`, "
        "divided by its CPU per MiB ingested (the same page writes plus the claim-check blob's "
        "upload and download), bounds the ratio at about 0.5 even if nothing else cost anything; "
        "the measured ratio is just under it. The read API is **not reliably met**: 0.50-0.52 in "
        "the two runs of the final code, 0.42-0.48 in earlier runs. The bytes come from the same "
        "GETs as the raw reads (read-ahead overlaps them with formatting), but decoding, checking "
        "and writing 4,000 NDJSON lines per 4 MiB in Python costs about as much as the GET. "
        "In Azure the HTTP "
        "tier, the writer instances and the storage accounts scale apart. The ingest figures are "
        "steady state: each stream gets one committed warm-up batch first, because idle queue pollers "
        "back off to `maxPollingInterval` (2 s), which also sets the latency figures."
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
