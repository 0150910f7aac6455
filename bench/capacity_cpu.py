"""The capacity model's writer and staging CPU (docs/CAPACITY.md §3), measured against Azurite.

    ./dev bench capacity_cpu            (python -m bench.capacity_cpu)

The app's own code runs in this process on an in-memory Azurite (which runs apart, so its CPU
is not counted): ``Stager.stage`` for the HTTP tier's staging of a batch, and
``writer_fn.write_staged`` invoked the way the host does (get one message, invoke, delete it)
until the queue is empty, for the writer. Three shapes: 1 message of 200 B (the per-batch
cost), 1,000 messages of 100 B and of 1 KiB (the per-message and per-KiB costs; both claim-check
batches, their values hex from random bytes: :func:`_value`).
Each figure is the median of three rounds; the per-batch ones are also given against one raw
Delete Message call of the SDK (the request the writer makes for every batch), measured in the
same run, which is what to compare between runs on a shared machine.
``vault_client.capacity`` takes its CPU figures from here.
"""

from __future__ import annotations

import functools
import random
import statistics
import time
import uuid
from collections.abc import Callable

from bench.common import report
from vault_app.config import load_settings
from vault_app.runtime import Runtime
from vault_app.services import Services, StagingQueue
from vault_app.staging import Stager
from vault_app.writer_fn import StagingMessage, write_staged
from vault_core.queues import QueuedMessage
from vault_core.recordformat import NewMessage
from vault_local.azurite import Azurite
from vault_local.process import local_env

SHAPES = [(1, 200, 400), (1000, 100, 30), (1000, 1024, 30)]
"""(messages per batch, value bytes, batches): the per-batch cost, then the per-message and
per-KiB costs from two batches of 1,000 (the second a claim-check)."""
KIB_DIFFERENCE = (1024 - 100) / 1024
ROUNDS = 3
"""Each shape is staged and written this many times; the figures are the medians."""


def _value(rng: random.Random, size: int) -> bytes:
    """``size`` bytes of hex from random bytes: text that zstd only halves, so a batch of 1,000 of
    them goes to a claim-check blob in either format, as the model counts it (repeated bytes
    would travel inline as units in format 2, since 1b97731)."""
    return rng.randbytes((size + 1) // 2).hex().encode()[:size]


def cpu_of(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def raw_delete_seconds(queue: StagingQueue, count: int = 400) -> float:
    for i in range(count):
        queue.staging.send(f"raw-{i}")
    held: list[QueuedMessage] = []
    while len(held) < count:
        got = queue.staging.receive(32, 60)
        if not got:
            break
        held += got

    def delete_all() -> None:
        for m in held:
            queue.staging.delete(m)

    return cpu_of(delete_all) / len(held)


def stage_many(stager: Stager, stream: str, messages: list[NewMessage], batches: int) -> None:
    for _ in range(batches):
        stager.stage(stream, uuid.uuid4().hex, messages)


def drain_with_the_writer(runtime: Runtime, queue: StagingQueue) -> None:
    """What the host does: one message, one invocation, then its delete; until none is left."""
    while held := queue.staging.receive(1, 60):
        m = held[0]
        write_staged(runtime, queue, StagingMessage(m.id, m.body, 1, m.receipt))
        queue.staging.delete(m)


def solve(cpu: dict[tuple[int, int], float]) -> tuple[float, float, float]:
    """(per batch, per message, per KiB of values) from the three shapes' CPU per batch."""
    single, small, large = (cpu[count, value_bytes] for count, value_bytes, _ in SHAPES)
    per_kib = (large - small) / 1000 / KIB_DIFFERENCE
    per_message = (small - single) / 999 - per_kib * 100 / 1024
    return single, per_message, per_kib


def main() -> None:
    azurite = Azurite(in_memory=True).start()
    try:
        env = {**local_env(azurite.connection_string, "bench-key-0123456789"), "VAULT_STAGING_QUEUES": "1"}
        services = Services(load_settings(env))
        services.ensure()
        runtime = Runtime(services)
        queue = services.queues[0]
        delete = statistics.median(raw_delete_seconds(queue) for _ in range(ROUNDS))
        stager = Stager(services)
        rng = random.Random(24)
        stage_cpu: dict[tuple[int, int], float] = {}
        write_cpu: dict[tuple[int, int], float] = {}
        for count, value_bytes, batches in SHAPES:
            stream = f"cpu-{count}-{value_bytes}"
            messages = [NewMessage(_value(rng, value_bytes), f"key-{i:012d}") for i in range(count)]
            stager.stage(stream, "warm-" + uuid.uuid4().hex, messages)  # opens the stream once
            drain_with_the_writer(runtime, queue)
            staged, written = [], []
            for _ in range(ROUNDS):
                staged.append(cpu_of(functools.partial(stage_many, stager, stream, messages, batches)))
                written.append(cpu_of(functools.partial(drain_with_the_writer, runtime, queue)))
            stage_cpu[count, value_bytes] = statistics.median(staged) / batches
            write_cpu[count, value_bytes] = statistics.median(written) / batches
        writer = solve(write_cpu)
        staging = solve(stage_cpu)
        figures = {
            "raw delete_message CPU ms": delete * 1000,
            "writer CPU ms per batch": writer[0] * 1000,
            "writer CPU per batch / raw delete_message": writer[0] / delete,
            "writer CPU us per message": writer[1] * 1e6,
            "writer CPU us per KiB of values": writer[2] * 1e6,
            "staging CPU ms per POST": staging[0] * 1000,
            "staging CPU per POST / raw delete_message": staging[0] / delete,
            "staging CPU us per message": staging[1] * 1e6,
            "staging CPU us per KiB of values": staging[2] * 1e6,
        }
        report("capacity_cpu", "./dev bench capacity_cpu", figures)
    finally:
        runtime.close()
        azurite.cleanup()


if __name__ == "__main__":
    main()
