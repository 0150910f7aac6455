"""A writer process that stops at a chosen point and waits to be killed with SIGKILL.

Usage: python crash_writer.py CONNECTION_STRING STREAM PHASE BATCH_ID
PHASE is ``before-commit`` (pages written, commit record not) or ``after-commit``
(commit record written, index/batch rows not). The process prints ``PAUSED`` and sleeps;
the test kills it with ``kill -9`` and checks what the next writer and readers see.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from vault_core.azure import StorageAccount
from vault_core.index import IndexTables
from vault_core.pageblob import StreamBlob
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings


def pause(*_: Any, **__: Any) -> None:
    print("PAUSED", flush=True)
    time.sleep(3600)


def main() -> None:
    conn, stream, phase, batch_id = sys.argv[1:5]
    vault = Vault(StorageAccount(connection_string=conn)).ensure()
    writer = vault.writer(stream, WriterSettings(lease_seconds=15))
    messages = [NewMessage(b"uncommitted-%d" % i + b"x" * 3000, "crash") for i in range(3000)]
    if phase == "before-commit":
        StreamBlob.commit = pause  # type: ignore[method-assign,assignment]
    else:
        IndexTables.record_index = pause  # type: ignore[method-assign]
        IndexTables.record_commit = pause  # type: ignore[method-assign]
    writer.append([Batch(messages, batch_id)])


if __name__ == "__main__":
    main()
