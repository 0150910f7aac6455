"""Python CPU of the HTTP tier's own work per 1,000 messages: parsing a POST body, building read lines.

    ./dev bench parse          (python -m bench.parse)

No storage: this is the per-message code on the request path (issue 12 asks to measure it
before and after choosing a decoder). The stdlib ``json.loads`` of the same body is measured
beside it, as the floor a JSON parser in Python starts from. A read page is built message by
message (``wire_line``) and column by column (``wire_lines``, what the read API does, issue 23).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from bench.common import report
from vault_app.config import Limits
from vault_app.ingest import parse_batch
from vault_app.wire import ENCODER, WirePage, wire_line, wire_lines
from vault_core.recordformat import Message

MESSAGES = 1000


def cpu_ms_per_1000(fn: Callable[[], object], rounds: int = 30) -> float:
    """Median process CPU of one call, in ms, scaled to 1,000 messages."""
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    samples.sort()
    return samples[len(samples) // 2] * 1000 * 1000 / MESSAGES


def bodies(size: int) -> tuple[bytes, bytes]:
    messages = [{"key": f"user-{i}", "value": f"{i:08d}" + "x" * (size - 8)} for i in range(MESSAGES)]
    as_json = json.dumps({"messages": messages}).encode()
    as_ndjson = b"\n".join(json.dumps(m).encode() for m in messages)
    return as_json, as_ndjson


def main() -> None:
    limits = Limits()
    figures: dict[str, float] = {}
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        as_json, as_ndjson = bodies(size)
        figures[f"parse JSON body, {label} values: CPU ms / 1,000 msgs"] = cpu_ms_per_1000(
            lambda b=as_json: parse_batch(b, "application/json", limits)  # type: ignore[misc]
        )
        figures[f"parse NDJSON body, {label} values: CPU ms / 1,000 msgs"] = cpu_ms_per_1000(
            lambda b=as_ndjson: parse_batch(b, "application/x-ndjson", limits)  # type: ignore[misc]
        )
        figures[f"stdlib json.loads of the JSON body, {label}: CPU ms / 1,000 msgs"] = cpu_ms_per_1000(
            lambda b=as_json: json.loads(b)  # type: ignore[misc]
        )
        rows = [Message(i * 64, 1_700_000_000_000, b"user-%d" % i, b"x" * size, 1) for i in range(MESSAGES)]
        by_message = cpu_ms_per_1000(
            lambda r=rows: ENCODER.encode(WirePage("s", 0, 0, [wire_line(m, False) for m in r]))  # type: ignore[misc]
        )
        by_column = cpu_ms_per_1000(
            lambda r=rows: ENCODER.encode(WirePage("s", 0, 0, wire_lines(r, False)))  # type: ignore[misc]
        )
        figures[f"read page (JSON), {label} values: CPU ms / 1,000 msgs"] = by_message
        figures[f"read page (JSON) column by column, {label}: CPU ms / 1,000 msgs"] = by_column
        figures[f"read page, column by column / message by message, {label}"] = by_column / by_message
    report("parse", "./dev bench parse", figures)


if __name__ == "__main__":
    main()
