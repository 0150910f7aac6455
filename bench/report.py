"""Write BENCHMARKS.md from bench/results/*.json: every figure beside the command that produced it.

python -m bench.report
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from bench.common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
ORDER = [
    "core",
    "ingest",
    "spark_read",
    "client",
    "scaleout",
    "scaleout_requeue",
    "recovery",
    "parse",
    "post_memory",
]
TITLES = {
    "core": "Core log (issue 2): writer and reader vs raw page-blob calls",
    "ingest": "Function App end to end (issue 3): HTTP ingest, staging, writer, read API",
    "spark_read": "Spark (issue 4): data source vs raw parallel range downloads",
    "client": "Python client (issue 6): producer and consumers",
    "scaleout": "Scale-out: 1, 2 and 3 writer instances on the same queues and storage",
    "scaleout_requeue": (
        "Scale-out before the queue owners (commit 72582df: a batch that met a leased stream was "
        "re-queued for 1 s)"
    ),
    "recovery": "Recovery: a killed writer instance, and a 10 s storage stall",
    "parse": "HTTP tier CPU (issue 12): parsing POST bodies and building read pages, per 1,000 messages",
    "post_memory": "HTTP tier memory (issue 12): peak worker memory of one POST against its body size",
}

NOTES = {
    "core": (
        "Ratios are medians of five rounds of back-to-back raw/ours runs. The writer is handed four "
        "~4 MiB batches per append, as the writer function hands over what it drained; one batch per "
        "call is shown too. Peak RSS is the child process's `VmHWM` (not `ru_maxrss`, which Linux "
        "carries across `exec`). The scan ratio moves around its 0.8 target between runs (0.714 in "
        "the previous recorded run, 0.817 in this one) since the storage clients read responses in "
        "256 KiB blocks instead of the SDK's 4 KiB: that made the raw 4 MiB range reads about 2.2x "
        "faster and the scan about 1.8x faster, so the scan is bound by decoding and checking "
        "records in Python, not by the network. **Reads start only at proven record boundaries** "
        "(issue 12, FORMAT.md 7.3): the near-end read starts at an index point, and a read from a "
        "boundary the reader has proven before costs nothing extra (ratio 0.95, target <= 1.5). "
        "The last two rows are a consumer's *first* read at a boundary 300 records past an index "
        "point, in a fresh process: one Tables query and a walk over the record headers from "
        "that point, about 2x the cost of a read at offset 0, once per offset per process."
    ),
    "ingest": (
        "Each figure is the median of three paired rounds (raw primitive, then ours, back to back) on "
        "one disk-backed Azurite, with the local host running 2 language-worker processes "
        "(`FUNCTIONS_WORKER_PROCESS_COUNT`). This run is on the code of issues 10-12: every POST now "
        "also reserves its batch id in Tables (3 storage calls instead of 2), carries a function key "
        "through the access check, and the writer's drain receives 32 messages per request (it "
        "fetched one per request before, the SDK's default), which cut Azurite's CPU per 1,000 "
        "messages from 18 to 13.5 ms (100 B) and from 46 to 32 ms (1 KiB). Absolute ingest rose "
        "(100 B: 37,300 to 47,600 msgs/s; 1 KiB: 20,400 to 23,100; large batches: 22.0 to 31.6 "
        "MiB/s). **Met**: large batches, 0.504 of raw `upload_page`. **100 B ingest**: 97.6x the "
        "plain `send_message` loop in this run, 125x in the previous recorded run: the raw loop "
        "itself moved by 40% between the two runs (363 to 514 msgs/s), so the ratio moves with it. "
        "**1 KiB ingest is bounded by Azurite**: one Node process, at most one core, and 32 ms of "
        "its CPU per 1,000 messages caps any ingest through it near 31,300 msgs/s, about 61x raw "
        "`send_message`; the measured rate is 0.74 of that ceiling. The read API is **not reliably "
        "met**: 0.40 in this run, 0.42-0.52 in earlier runs. The bytes come from the same GETs as "
        "the raw reads (read-ahead overlaps them with formatting), but decoding, checking and "
        "writing 4,000 NDJSON lines per 4 MiB in Python costs about as much as the GET. In Azure "
        "the HTTP tier, the writer instances and the storage accounts scale apart. The ingest "
        "figures are steady state: each stream gets one committed warm-up batch first, because idle "
        "queue pollers back off to `maxPollingInterval` (2 s), which also sets the latency figures."
    ),
    "spark_read": (
        "**Not met**: Spark `count()` reads at about 0.4 of plain parallel range downloads (target 0.7). "
        "On 2 cores the read is CPU-bound: Azurite and the JVM alone need ~2.3 CPU-s for this read "
        "(a ceiling near 0.78 even if Python cost nothing); the Python workers add ~2 CPU-s for HTTP, "
        "CRC checks and Arrow columns. The in-memory source row shows Spark's own cost of taking rows "
        "from any Python data source."
    ),
    "client": "Both targets met. The producer ratio is the median of back-to-back paired runs.",
    "scaleout": (
        "Each host is one instance (HTTP and the queue-triggered writer, one language worker), all on "
        "one disk-backed Azurite and one queue prefix; the producers post round robin over the hosts. "
        "Each configuration has a paced phase for latency (1,500 msgs/s, well under what one host "
        "sustains: POST to committed for every batch, from the `b` row that "
        "`GET /streams/{s}/batches/{id}` reads, polled every 0.1 s; about 180 batches per round, so "
        "p99 is about the second largest) and a saturated phase for msgs/s (8 threads back to back, "
        "until every acknowledged message is committed). Host counts ran 1, 2, 3, 3, 2, 1 per "
        "scenario; figures are the medians of the two rounds, failures are summed. **All targets "
        "met**, with the queue owners of docs/ARCHITECTURE.md §3.7: nothing poisoned, lost or "
        "duplicated (every stream read back), no stream ever changed its writing host, and with 3 "
        "hosts msgs/s and p99 at 1.16 and 0.88 of one host's (8 streams) and 1.38 and 0.84 (1 hot "
        "stream). The machine is shared, and the msgs/s ratios move with it: the full run before "
        "this one gave 0.95 and 1.08 (8 streams), 0.87 and 0.98 (1 hot stream); here other jobs "
        "took up to 0.9 of a core while the 1-host configurations ran. The hand-backs are now "
        "batches that reached an instance which does not own their queue and were passed straight "
        "back; a non-owner then pauses 1 s, so there are at most about one per second per queue and "
        "instance. **What limits msgs/s is the machine's 2 cores**, not Azurite and not "
        "contention: the machine is 1.6 to 1.95 cores busy, Azurite uses about half of its one "
        "core, and our processes reach 0.5 to 0.8 of the 2-core ceiling (2 cores divided by the "
        "CPU that Azurite, the hosts and the benchmark spend per message), the rest idle or "
        "taken by other jobs. One host alone is also limited by its single HTTP process and worker; three "
        "hosts spent a quarter to a third more host CPU per message in the earlier run (three "
        "sets of processes and queue pollers on 2 cores), about the same in this one. On Azure "
        "each instance has a machine of its own."
    ),
    "scaleout_requeue": (
        "The same benchmark on the design that docs/ARCHITECTURE.md §3.7 replaced: the writer took a "
        "stream's lease wherever a batch landed and handed batches of streams leased elsewhere back "
        "for 1 s; run at commit 72582df (the benchmark with that design; it sampled every second "
        "batch, so p99 is the largest of about 90). **Targets missed by far**: with 3 hosts 0.38 "
        "(8 streams) and 0.68 (1 hot stream) of one host's msgs/s, p99 26x and 43x. Under the "
        "paced load a batch was handed back 2.3 times on average with 3 hosts on 8 streams (420 "
        "hand-backs for 180 batches), each time for at least 1 s, and the stream leases kept "
        "moving between hosts; the hand-backs also cost storage work (Azurite CPU per 1,000 msgs "
        "132 ms with one host, 233 ms with three). Nothing was lost, duplicated or poisoned: the "
        "stream lease kept the log correct, only slow."
    ),
    "recovery": (
        "**Kill**: host A takes the staging queues while 8 threads post 20 batches/s of 100 x 1 KiB "
        "into 4 streams through it; host B starts and polls the same queues; then the producers "
        "switch to B and A's process group gets SIGKILL while its writer is busy (its last commit "
        "0.05 to 0.16 s before). **Met**: every batch acknowledged before the kill was committed "
        "15.2 to 15.3 s after it (target: under 30 s). That is the 15 s for which a dead "
        "instance's claims last, by design: its queue owner and stream leases (15 s, renewed every "
        "5 s) and the invisibility of the messages it had taken (drained ones 15 s, renewed; on the "
        "local host the trigger messages too, `--inflight-visibility`); the batches it held "
        "reappear at 15 s and are committed within a few tenths of a second. Batches posted through "
        "B commit from about 12 s on, when A's owner leases run out. The few connection errors are "
        "POSTs in flight to A when it died, retried on B with the same Idempotency-Key. **On Azure "
        "one batch per queue can take longer**: the Functions host keeps a trigger message "
        "invisible for 10 minutes (docs/ARCHITECTURE.md §9), so the batch of each invocation "
        "that was running in the killed instance waits that out; drained batches and leases come "
        "back within 15 s. **Stall**: one host under the same load, Azurite frozen with SIGSTOP "
        "for 10 s. POSTs during the stall answered 503 (the 4 s storage budget), never 500, and were "
        "retried after 0.5 s. After SIGCONT the first commit came within 0.1 to 0.3 s, three 1 s "
        "buckets in a row reached 90% of the steady rate after 2 to 5 s, and the commits missed "
        "during the stall were made up after 5 to 15 s. The 1 s criterion is coarse: an append "
        "commits several batches at once, so even steady buckets hold 1,600 to 2,400 messages. "
        "Where it took 4 to 5 s, the writers of some queues resumed only that long after SIGCONT "
        "while the others resumed at once; the cause was not pinned down (most likely storage "
        "calls in flight during the stall that were retried after the storage clients' back-off). "
        "Nothing was poisoned, lost or duplicated in either test."
    ),
    "parse": (
        "Python CPU only, no storage: the per-message work of the request path. **Before** "
        "(stdlib `json.loads` into dicts with per-field checks; read lines built by hand with the C "
        "string escaper), the same command measured at commit 62a712c: parse JSON 0.669 / 1.194 ms "
        "and NDJSON 2.307 / 3.231 ms per 1,000 messages (100 B / 1 KiB values), read lines 1.238 / "
        "1.870 ms. **After** (request bodies decoded by msgspec into typed structs that refuse "
        "unknown fields; read pages encoded by msgspec): the table, about 0.4 to 1.0 ms to parse and "
        "0.68 / 1.01 ms per page, so 1.2 to 5.6x less CPU, and simpler code: msgspec was kept."
    ),
    "post_memory": (
        "Real POSTs to the local host on Azurite; for each, the language worker's peak resident "
        "memory is reset (`/proc/PID/clear_refs`) and the growth over the body size is read from "
        "`VmHWM`. The issue's case, a 16 MiB body of unknown fields, grew a worker by over 400 MB "
        "before (about 25x); it is now refused while decoding, at 1.0x (the body itself). Bodies "
        "that are refused for their size, their nesting or their number of messages stay at 1.0 to "
        "1.5x. **Valid 16 MiB batches are at 4.1x (large values) and 5.0x (10,000 values of 1.6 KB), "
        "around and slightly over the 4x target**: the request body, the messages as bytes and the "
        "claim-check body are in memory together, and the claim-check body is built in a buffer and "
        "copied once to `bytes` for the upload (the SDK treats a `bytearray` as an iterable)."
    ),
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
