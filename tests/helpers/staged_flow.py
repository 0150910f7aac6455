"""Ingest in-process, as the Functions host drives it: stage batches with the HTTP tier's code,
then run the writer function's body on the real queue message, then delete it (the host's part).

Imports nothing of OpenTelemetry, so that ``python staged_flow.py CONNECTION_STRING`` can show
which modules an ingest loads with telemetry off: it prints them as JSON, one per line.
"""

from __future__ import annotations

import json
import sys
import uuid

from vault_app.config import load_settings
from vault_app.runtime import Runtime
from vault_app.services import Services
from vault_app.staging import Stager
from vault_app.writer_fn import StagingMessage, write_staged
from vault_core.recordformat import NewMessage
from vault_local.process import local_env


def runtime_on(connection_string: str) -> Runtime:
    """The app's runtime on Azurite, on staging queues of their own (a fresh prefix)."""
    env = {
        **local_env(connection_string, "staged-flow-key-0123456789"),
        "VAULT_QUEUE_PREFIX": f"q{uuid.uuid4().hex[:8]}",
    }
    runtime = Runtime(Services(load_settings(env)))
    runtime.services.ensure()
    return runtime


def stage(services: Services, stream: str, batches: list[list[NewMessage]]) -> list[str]:
    """Stage each batch as a POST does; their ids, in order."""
    ids = [f"b{i}-{uuid.uuid4().hex[:8]}" for i in range(len(batches))]
    stager = Stager(services)
    for batch_id, messages in zip(ids, batches, strict=True):
        stager.stage(stream, batch_id, messages)
    return ids


def write_next(runtime: Runtime, stream: str) -> None:
    """One writer invocation on the next message of the stream's queue, which must have one."""
    queue = runtime.services.queue_for(stream)
    received = queue.staging.receive(1, 30)
    assert received, f"nothing staged in {queue.name}"
    message = received[0]
    write_staged(runtime, queue, StagingMessage(message.id, message.body, 1, message.receipt))
    queue.staging.delete(message)  # the host's part, on success


def main() -> None:
    runtime = runtime_on(sys.argv[1])
    stream = f"flow-{uuid.uuid4().hex[:8]}"
    stage(runtime.services, stream, [[NewMessage(b"one")], [NewMessage(b"two", "k")]])
    write_next(runtime, stream)
    runtime.close()
    assert runtime.services.vault.reader.state(stream).count == 2, "both batches committed"
    loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "azure.monitor")))
    print(json.dumps(loaded))


if __name__ == "__main__":
    main()
