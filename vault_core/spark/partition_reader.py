"""One Spark task: download a partition's bytes in large ranges and yield Arrow batches.

The I/O is :func:`vault_core.reader.scan_log`'s (:func:`vault_core.prefetch.prefetched_chunks`:
``chunk``-sized ranged GETs with ``prefetch`` in flight), with a carry of the record cut by each
chunk edge, every CRC verified. Decoding is columnar (:mod:`vault_core.spark.columnar`): one Arrow
batch per run of version 2 units (up to 4 MiB of payload, their key and value columns built over
the decompressed payloads and joined) and one per run of version 1 records, each decoded when
Spark asks for it, so that decoding the next overlaps the JVM's work on the last.

Without ``skip_corrupt`` the first record that does not verify raises the reference
:class:`CorruptRecord`, which Spark shows with the stream and offset. With it, the rest of the
partition, from that record on, is read by :func:`vault_core.reader.scan_log` with its own
``skip_corrupt`` (the vault's one definition of skipping and resynchronising), slower but
rare; the skipped bytes go into a :class:`SkipReport`, which is logged (WARNING, executor log)
and, when ``corruptReportPath`` is set, written as one small JSON file per partition.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from vault_core.errors import CorruptRecord
from vault_core.pagelog import ReadableLog
from vault_core.prefetch import prefetched_chunks
from vault_core.reader import ScanOptions, scan_log
from vault_core.recordformat import Message
from vault_core.spark.columnar import Decoder, messages_to_columns, record_batch
from vault_core.spark.connection import clients
from vault_core.spark.plan import Partition
from vault_core.spark.schema import ARROW_SCHEMA
from vault_core.spark.worker_gc import freeze_imported_objects

log = logging.getLogger("vault_core.spark")
_SLOW_BATCH_ROWS = 8192


def read_partition(part: Partition, schema: pa.Schema = ARROW_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Every record of ``part`` as Arrow batches in ``schema`` (the exact schema Spark expects)."""
    freeze_imported_objects()  # a generator: runs at the first batch, in the task's worker
    blob = clients(part.connection).blob(part.stream)
    settings = part.settings
    report = SkipReport(part.stream, part.start, part.end)
    chunks = prefetched_chunks(
        blob, part.start, part.end, chunk=settings.chunk_bytes, prefetch=settings.prefetch
    )
    base = part.start  # stream offset of buf[0]
    carry = b""
    try:
        for data, last in chunks:
            buf = carry + data if carry else data
            pieces = Decoder(buf, base, last=last, stream=part.stream)
            for cols in pieces:
                yield _within(record_batch(part.stream, cols.arrays, cols.rows, schema), part)
            if pieces.error is not None:
                if not (settings.skip_corrupt and isinstance(pieces.error, CorruptRecord)):
                    raise pieces.error
                chunks.close()
                yield from _skipping(blob, base + pieces.end, part, schema, report)
                return
            carry = buf[pieces.end :]
            base += pieces.end
    finally:
        chunks.close()
        if report.skipped:
            report.publish(settings.corrupt_report_path)


def _within(batch: pa.RecordBatch, part: Partition) -> pa.RecordBatch:
    """``batch`` without the rows a range that starts or ends inside a unit leaves out."""
    first, stop = part.range.first, part.range.stop
    if first is None and stop is None:
        return batch
    offsets = batch.column("offset")
    keep = pc.greater_equal(offsets, pa.scalar(first or 0, pa.int64()))
    if stop is not None:
        keep = pc.and_(keep, pc.less(offsets, pa.scalar(stop, pa.int64())))
    return batch.filter(keep)


def _skipping(
    blob: ReadableLog, start: int, part: Partition, schema: pa.Schema, report: SkipReport
) -> Iterator[pa.RecordBatch]:
    """``[start, part.end)`` through scan_log's skip-and-resynchronise; ``start`` is a boundary."""
    pending: list[Message] = []
    options = ScanOptions(
        chunk=part.settings.chunk_bytes,
        prefetch=part.settings.prefetch,
        skip_corrupt=True,
        on_skip=lambda offset, n: report.add(offset, offset + n),
    )
    for message in scan_log(blob, start, part.end, options):
        pending.append(message)
        if len(pending) >= _SLOW_BATCH_ROWS:
            yield _within(record_batch(part.stream, messages_to_columns(pending), len(pending), schema), part)
            pending = []
    if pending:
        yield _within(record_batch(part.stream, messages_to_columns(pending), len(pending), schema), part)


@dataclass
class SkipReport:
    """Corrupt stretches one partition skipped: ``(offset, bytes)``, adjacent stretches merged."""

    stream: str
    start: int
    end: int
    skips: list[list[int]] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.skips)

    @property
    def skipped_bytes(self) -> int:
        return sum(n for _, n in self.skips)

    def add(self, begin: int, end: int) -> None:
        if end <= begin:
            return
        if self.skips and self.skips[-1][0] + self.skips[-1][1] == begin:
            self.skips[-1][1] += end - begin
        else:
            self.skips.append([begin, end - begin])

    def to_json(self) -> dict[str, object]:
        return {
            "stream": self.stream,
            "start": self.start,
            "end": self.end,
            "skipped": self.skipped,
            "skipped_bytes": self.skipped_bytes,
            "skips": [{"offset": o, "bytes": n} for o, n in self.skips],
        }

    def publish(self, directory: str | None) -> None:
        """Log the skips; with ``directory`` also write them as ``<stream>-<start>-<end>.json`` there."""
        log.warning(
            "messagevault skipped %d corrupt stretch(es), %d bytes, in stream %s [%d, %d): %s",
            self.skipped,
            self.skipped_bytes,
            self.stream,
            self.start,
            self.end,
            self.skips,
        )
        if not directory:
            return
        os.makedirs(directory, exist_ok=True)
        name = os.path.join(directory, f"{self.stream}-{self.start:016x}-{self.end:016x}.json")
        tmp = f"{name}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f)
        os.replace(tmp, name)  # a retried task rewrites the same file: no double counting


def read_skip_reports(directory: str) -> list[dict[str, object]]:
    """The reports :meth:`SkipReport.publish` wrote under ``directory`` (driver side, local paths)."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                out.append(json.load(f))
    return out
