"""Structured Streaming for ``messagevault``: offsets are committed lengths, per stream.

An offset is the JSON object ``{"<stream>": <committed bytes>, ...}``. Committed lengths only
grow and are always record boundaries, so a micro-batch ``(start, end]`` is exactly the bytes
``[start[s], end[s])`` of each stream: Spark's checkpoint of the last ``end`` is all a
restarted query needs to continue without re-reading or missing a record.

``latestOffset`` reads each stream's commit record (one HEAD-like request per stream);
``trigger(availableNow=True)`` pins the target to the committed lengths when the query starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from vault_core.spark.input_partition import VaultInputPartition
from vault_core.spark.options import LATEST, PositionSpec, ReadOptions
from vault_core.spark.plan import Planner, StreamRange

try:  # Spark >= 4.2; older Spark runs availableNow without asking the source
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - depends on the installed Spark

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for Spark < 4.2, which has no such mix-in."""


class VaultStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads new committed records of every configured stream, micro-batch by micro-batch.

    Holds no SDK clients: Spark pickles it to run ``read`` in the tasks.
    """

    def __init__(self, options: ReadOptions, schema: pa.Schema) -> None:
        if options.end != PositionSpec(LATEST):
            raise ValueError("toOffset / toTime apply to batch reads; a stream has no end")
        self.options = options
        self.arrow_schema = schema
        self._target: dict[str, int] | None = None

    def _planner(self) -> Planner:
        return Planner(self.options.connection)

    def _initial(self, planner: Planner, stream: str) -> int:
        # A stream that does not exist yet starts at 0: the query waits for its first commit.
        position = self.options.start.for_stream(stream)
        return planner.resolve_range(stream, position, LATEST, missing_ok=True).start

    def _committed(self, planner: Planner) -> dict[str, int]:
        return {s: planner.committed(s, missing_ok=True) for s in self.options.streams}

    def initialOffset(self) -> dict[str, int]:
        planner = self._planner()
        return {s: self._initial(planner, s) for s in self.options.streams}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        """Committed lengths now (capped by the availableNow target); never behind ``start``.

        Takes ``start``/``limit`` (Spark >= 4.2) or nothing (Spark 4.0/4.1); every limit is
        served as "all available", which is also the default read limit we report.
        """
        committed = self._committed(self._planner())
        target = self._target or {}
        latest = {}
        for s, c in committed.items():
            latest[s] = min(c, target.get(s, c))
            if start:
                # The target may predate a "latest" start resolved just after it; a stream that
                # shrank (recreated) stays below ``start`` so that partitions() reports it.
                latest[s] = max(latest[s], min(c, int(start.get(s, 0))))
        return latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._committed(self._planner())

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        planner = self._planner()
        ranges = []
        for stream in self.options.streams:
            if stream not in end:
                continue
            hi = int(end[stream])
            lo = int(start[stream]) if stream in start else min(self._initial(planner, stream), hi)
            pending = StreamRange.since(stream, lo, hi, "Start the query with a new checkpoint.")
            unit = planner.unit_around(stream, lo, hi) if pending and stream not in start else None
            if unit:  # a starting offset inside a version 2 unit: decode the unit, drop what precedes
                ranges.append(StreamRange(stream, unit[0], hi, first=lo))
            elif pending is not None:
                ranges.append(pending)
        return [VaultInputPartition(p) for p in planner.partitions(ranges, self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, VaultInputPartition):
            return iter(())
        from vault_core.spark.partition_reader import read_partition  # in the tasks, not the planner

        return read_partition(partition.part, self.arrow_schema)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the log is kept; progress lives in Spark's checkpoint."""
