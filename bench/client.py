"""Client benchmark (issue 6): the Python producer and the two consumer read paths.

    ./dev bench client                          (starts its own in-memory Azurite and local host)
    ./dev bench client --url URL --key KEY      (against a running vault instead)

Ratios, measured in one run on the same host:
  * producer messages/s through ``Producer`` / a hand-written loop of batched POSTs with the
    same batch size, both counting a batch as done when the API accepted it (target >= 0.9);
  * consumer messages/s reading one whole stream directly from the blob with the SAS the API
    hands out / through the HTTP API (target >= 1.5).
Each figure is the median of ``--runs`` runs. Producer runs come in loop/client pairs (which
goes first alternates), each run starting once the host has committed the previous run's
messages; the producer ratio is the median of the pairs' ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack

import httpx

from bench.common import MIB, report
from vault_client import ApiClient, ApiNotFound, Consumer, Producer


def stream_name(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:8]}"


def hand_loop(url: str, key: str, stream: str, count: int, size: int, batch: int) -> float:
    """Messages/s of the simplest correct producer: one POST per batch, one after the other."""
    value = "v" * size
    with httpx.Client(base_url=url, timeout=120, headers={"x-functions-key": key}) as client:
        start = time.perf_counter()
        for first in range(0, count, batch):
            body = json.dumps(
                {
                    "messages": [
                        {"key": f"k{i % 50}", "value": value} for i in range(first, min(count, first + batch))
                    ]
                }
            )
            r = client.post(
                f"/streams/{stream}/messages",
                content=body,
                headers={"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex},
            )
            assert r.status_code == 202, r.text
        return count / (time.perf_counter() - start)


def client_producer(url: str, key: str, stream: str, count: int, size: int, batch: int) -> float:
    """Messages/s of ``Producer.send`` for every message, then ``close()`` (which flushes)."""
    value = "v" * size
    start = time.perf_counter()
    with Producer(url, key, batch_max_messages=batch, batch_max_bytes=16 * MIB - 1024) as producer:
        for i in range(count):
            producer.send(stream, value, key=f"k{i % 50}")
    elapsed = time.perf_counter() - start
    stats = producer.stats()
    assert stats.messages == count and stats.failed == 0, stats
    return count / elapsed


def wait_committed(api: ApiClient, stream: str, count: int, timeout: float = 300) -> None:
    """Block until ``count`` messages of ``stream`` are committed (the host's writer is idle again)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if int(api.stream(stream).get("count") or 0) >= count:
                return
        except ApiNotFound:  # not created yet
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{count} messages were not committed to {stream} within {timeout} s")


def fill(api: ApiClient, count: int, size: int) -> str:
    """A stream of ``count`` messages, produced with the client and waited for until committed."""
    stream = stream_name("read")
    with Producer(api=api, batch_max_messages=5000, batch_max_bytes=8 * MIB) as producer:
        for i in range(count):
            producer.send(stream, f"{i:08d}" + "v" * (size - 8), key=f"k{i % 50}")
    wait_committed(api, stream, count)
    return stream


def read_rate(api: ApiClient, stream: str, count: int, direct: bool) -> float:
    start = time.perf_counter()
    n = sum(1 for _ in Consumer.connect(None, stream, api=api, direct=direct))
    elapsed = time.perf_counter() - start
    assert n == count, (n, count)
    return count / elapsed


def median(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(prog="./dev bench client", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running vault API (default: start Azurite and a local host)")
    parser.add_argument("--key", help="its function key (with --url)")
    parser.add_argument("--messages", type=int, default=20_000, help="messages per producer run")
    parser.add_argument("--size", type=int, default=100, help="value bytes per message")
    parser.add_argument("--batch", type=int, default=1000, help="messages per batch, for both producers")
    parser.add_argument("--read-messages", type=int, default=100_000, help="messages in the stream read")
    parser.add_argument("--read-size", type=int, default=200, help="value bytes of the messages read")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    t0 = time.monotonic()
    with ExitStack() as stack:
        if args.url:
            url, key = args.url, args.key or ""
        else:
            from vault_local.azurite import Azurite
            from vault_local.process import HostProcess

            azurite = Azurite(in_memory=True).start()
            stack.callback(azurite.cleanup)
            host = HostProcess(azurite.connection_string).start()
            stack.callback(host.stop)
            url, key = host.url, host.key
        api = stack.enter_context(ApiClient(url, key, timeout=120))
        warm = stream_name("warm")
        hand_loop(url, key, warm, args.batch * 2, args.size, args.batch)  # warm the host's connections
        wait_committed(api, warm, args.batch * 2)
        loop_rates: list[float] = []
        client_rates: list[float] = []
        for i in range(args.runs):
            # Each run starts with the host idle: the writer has committed the previous run's
            # messages, so neither producer competes with the other's commits for the CPU.
            # The two alternate which goes first, so a drift in machine load favours neither.
            pair = [(loop_rates, hand_loop), (client_rates, client_producer)]
            for rates, run in pair if i % 2 == 0 else pair[::-1]:
                stream = stream_name(run.__name__.replace("_", "-"))
                rates.append(run(url, key, stream, args.messages, args.size, args.batch))
                wait_committed(api, stream, args.messages)
        print(
            "producer runs, msgs/s: hand loop",
            [round(r) for r in loop_rates],
            "Producer",
            [round(r) for r in client_rates],
        )
        figures: dict[str, float | int | str] = {}
        loop, client = statistics.median(loop_rates), statistics.median(client_rates)
        # The ratio is the median of the paired runs' ratios: each pair ran back to back, so on a
        # shared machine whose load drifts between pairs it compares like with like.
        paired = statistics.median(c / lo for c, lo in zip(client_rates, loop_rates, strict=True))
        figures[f"producer: hand loop msgs/s ({args.size} B, batches of {args.batch})"] = loop
        figures[f"producer: Producer msgs/s ({args.size} B, batches of {args.batch})"] = client
        figures["producer: Producer / hand loop, median of paired runs (>= 0.9)"] = paired
        figures["producer: median Producer / median hand loop"] = client / loop

        stream = fill(api, args.read_messages, args.read_size)
        committed = api.committed(stream)
        read_rate(api, stream, args.read_messages, direct=True)  # warm both paths once
        read_rate(api, stream, args.read_messages, direct=False)
        http_rate = median(args.runs, lambda: read_rate(api, stream, args.read_messages, direct=False))
        direct_rate = median(args.runs, lambda: read_rate(api, stream, args.read_messages, direct=True))
        seconds_per_mib = committed / MIB / args.read_messages
        figures[f"consumer: stream read (messages, {args.read_size} B values)"] = args.read_messages
        figures["consumer: stream read (MiB)"] = committed / MIB
        figures["consumer: HTTP API msgs/s"] = http_rate
        figures["consumer: HTTP API MiB/s"] = http_rate * seconds_per_mib
        figures["consumer: direct blob msgs/s"] = direct_rate
        figures["consumer: direct blob MiB/s"] = direct_rate * seconds_per_mib
        figures["consumer: direct / HTTP API (>= 1.5)"] = direct_rate / http_rate
        figures["target producer ratio met"] = "yes" if paired >= 0.9 else "no"
        figures["target consumer ratio met"] = "yes" if direct_rate / http_rate >= 1.5 else "no"
        figures["benchmark seconds"] = time.monotonic() - t0
        report("client", "./dev bench client", figures)


if __name__ == "__main__":
    main()
