"""Write tests/data/stream-release-0.1.json: a small stream as release 0.1 (commit 195f3a2,
record format 1 only) wrote it, for tests/test_format_upgrade.py.

Runnable only against the old tree (the current writer writes format 2 units)::

    git archive 195f3a2 vault_core | tar -x -C /tmp/old195
    PYTHONPATH=/tmp/old195:. .venv/bin/python tests/helpers/capture_release_stream.py

It starts an in-memory Azurite, writes four commits with a manual clock (text and binary keys,
an empty key, an empty value, batch ids, 300 messages, a 2 KiB index spacing so that there are
index points), then dumps the page blob's committed bytes, its size and metadata (the commit
record), the stream's index rows and catalog row, and every message the old reader scans.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import vault_core
from vault_core.azure import StorageAccount
from vault_core.clock import ManualClock
from vault_core.recordformat import NewMessage
from vault_core.rows import KeyRange
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings
from vault_local.azurite import Azurite

OUT = Path(__file__).resolve().parents[1] / "data" / "stream-release-0.1.json"
STREAM = "release-0-1"
INDEX_SPACING = 2048


def commits() -> list[list[Batch]]:
    first = [
        Batch([NewMessage(b"hello", "greeting"), NewMessage(b"", "empty-value"), NewMessage(b"x", b"")]),
        Batch([NewMessage(bytes(range(256)), b"\x00\xff\x01binary")], batch_id="b-1"),
    ]
    text = [Batch([NewMessage(f"text message {i}".encode(), f"key-{i % 7}") for i in range(150)], "b-2")]
    binary = [
        Batch([NewMessage(bytes([i % 256]) * (i % 40), bytes([i % 256, 0xFE])) for i in range(120)]),
        Batch([NewMessage("é ünïcode ✓".encode(), "ключ")]),
    ]
    last = [Batch([NewMessage(b"\x00" * 700, "big"), NewMessage(b"", b""), NewMessage(b"end", "end")], "b-3")]
    return [first, text, binary, last]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def main() -> None:
    if (Path(vault_core.__file__).parent / "unitformat.py").exists():  # format 2: not release 0.1
        sys.exit(f"{vault_core.__file__} is not release 0.1's vault_core: see this module's docstring")
    azurite = Azurite(in_memory=True).start()
    try:
        account = StorageAccount(connection_string=azurite.connection_string)
        clock = ManualClock(1_700_000_000_000)
        vault = Vault(account, clock=clock).ensure()
        for batches in commits():
            clock.advance(1000)
            with vault.writer(STREAM, WriterSettings(index_spacing=INDEX_SPACING)) as w:
                w.append(batches)
        blob = vault.page_blobs.client.get_blob_client(STREAM)  # type: ignore[attr-defined]
        props = blob.get_blob_properties()
        state = vault.reader.state(STREAM)
        data = blob.download_blob(offset=0, length=state.committed).readall()
        messages = list(vault.reader.scan(STREAM))
        index = vault.index.index.query(KeyRange(STREAM))
        catalog = vault.index.catalog.query()
        doc = {
            "produced_by": "tests/helpers/capture_release_stream.py with vault_core at 195f3a2",
            "stream": STREAM,
            "index_spacing": INDEX_SPACING,
            "blob_size": props.size,
            "metadata": dict(props.metadata),
            "committed_bytes": base64.b64encode(data).decode(),
            "index_rows": [{"key": r.key, "fields": r.fields} for r in index],
            "catalog_rows": [{"partition": r.partition, "key": r.key, "fields": r.fields} for r in catalog],
            "messages": [[m.offset, m.timestamp, b64(m.key), b64(m.value), m.flags] for m in messages],
        }
        OUT.write_text(json.dumps(doc, indent=0, ensure_ascii=True) + "\n")
        print(f"{OUT}: {len(messages)} messages, {state.committed} bytes, {len(index)} index rows")
    finally:
        azurite.cleanup()


if __name__ == "__main__":
    main()
