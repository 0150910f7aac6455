"""Writing messages to files: NDJSON (the API's message objects) or Parquet (pyarrow, imported lazily).

A file is written under a temporary name and renamed into place when complete, so a failed
export never leaves something that looks like a finished one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any, Protocol

from vault_client.wire import message_json
from vault_core.errors import InvalidInput
from vault_core.messagebatch import MessageBatch
from vault_core.recordformat import message_id

PARQUET_ROW_GROUP = 64 * 1024
FORMATS = ("parquet", "ndjson")


class Exporter(Protocol):
    def write_batch(self, batch: MessageBatch) -> None:
        """Add a scan's batch of messages (vault_core.messagebatch) to the file."""
        ...

    def commit(self) -> None:
        """Finish the file and move it into place."""
        ...

    def abort(self) -> None:
        """Drop the partial file."""
        ...


class _AtomicFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.partial = path.with_name(path.name + ".partial")

    def publish(self) -> None:
        os.replace(self.partial, self.path)

    def discard(self) -> None:
        self.partial.unlink(missing_ok=True)


class NdjsonExporter:
    def __init__(self, path: Path) -> None:
        self._file = _AtomicFile(path)
        self._out: IO[str] = open(self._file.partial, "w", encoding="utf-8")  # noqa: SIM115 - closed in commit/abort

    def write_batch(self, batch: MessageBatch) -> None:
        for message in batch.messages():
            self._out.write(json.dumps(message_json(message), ensure_ascii=False, separators=(",", ":")))
            self._out.write("\n")

    def commit(self) -> None:
        self._out.close()
        self._file.publish()

    def abort(self) -> None:
        self._out.close()
        self._file.discard()


class ParquetExporter:
    """Columns: offset int64, timestamp timestamp[ms, UTC], id string, key binary, value binary."""

    def __init__(self, path: Path, row_group: int = PARQUET_ROW_GROUP) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise InvalidInput("Parquet export needs pyarrow: pip install pyarrow") from None
        self._pa = pa
        self._file = _AtomicFile(path)
        self.schema = pa.schema(
            [
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("ms", tz="UTC")),
                ("id", pa.string()),
                ("key", pa.binary()),
                ("value", pa.binary()),
            ]
        )
        self._writer: Any = pq.ParquetWriter(str(self._file.partial), self.schema, compression="zstd")
        self._row_group = row_group
        self._batches: list[Any] = []
        self._rows = 0

    def write_batch(self, batch: MessageBatch) -> None:
        """The batch's columns as Arrow arrays over its own buffers; only the ids are made per message."""
        pa = self._pa
        n = len(batch)
        binary = pa.binary()
        columns = [
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(batch.offsets)]),
            pa.Array.from_buffers(
                self.schema.field("timestamp").type, n, [None, pa.py_buffer(batch.timestamps)]
            ),
            pa.array(map(message_id, batch.timestamps, batch.offsets), pa.string(), size=n),
            # a batch's 'I' boundaries are Arrow's int32 offsets as they are (a batch is < 2 GiB)
            pa.Array.from_buffers(binary, n, [None, pa.py_buffer(batch.key_ends), pa.py_buffer(batch.keys)]),
            pa.Array.from_buffers(
                binary, n, [None, pa.py_buffer(batch.value_ends), pa.py_buffer(batch.values)]
            ),
        ]
        self._batches.append(pa.RecordBatch.from_arrays(columns, schema=self.schema))
        self._rows += len(batch)
        if self._rows >= self._row_group:
            self._flush()

    def _flush(self) -> None:
        if self._batches:
            table = self._pa.Table.from_batches(self._batches, schema=self.schema)
            self._writer.write_table(table, row_group_size=self._row_group)
            self._batches, self._rows = [], 0

    def commit(self) -> None:
        self._flush()
        self._writer.close()
        self._file.publish()

    def abort(self) -> None:
        self._writer.close()
        self._file.discard()


def export_format(path: Path, fmt: str | None = None) -> str:
    """``fmt`` if given, else the format the file's suffix names; raises InvalidInput if it names none."""
    kind = fmt or {".parquet": "parquet", ".ndjson": "ndjson", ".jsonl": "ndjson"}.get(path.suffix.lower())
    if kind not in FORMATS:
        raise InvalidInput(
            f"cannot tell the export format of {str(path)!r}: name it .parquet or .ndjson, or pass --format"
        )
    return kind


def exporter_for(path: Path, fmt: str | None = None) -> Exporter:
    """An exporter by ``fmt`` (``parquet``/``ndjson``) or else by the file's suffix."""
    if export_format(path, fmt) == "parquet":
        return ParquetExporter(path)
    return NdjsonExporter(path)
