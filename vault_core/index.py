"""The stream catalog and the sparse offset/time index, in Azure Tables.

Everything here is *derived* data, like Kafka's index files: not checksummed, written after
the blob commit, and rebuilt from the log by the next writer if a crash lost it
(:meth:`vault_core.writer.StreamWriter.open` does that). The log is the truth.

Tables and keys (``<p>`` is the configured prefix, default ``mv``):

``<p>catalog``  PartitionKey ``stream``, RowKey = stream name: committed length, message
                count, first/last timestamp, created/updated.
``<p>index``    PartitionKey = stream name, three row families:
                ``o<offset:016x>``                    an index point, ascending by offset
                ``t<~ts:012x><~offset:012x>``         the same point, *descending* by time
                ``b<batch id>``                       a committed producer batch (exactly-once)

Tables only return rows in ascending key order, so the ``t`` family stores inverted
numbers: "the last point before time T" becomes "the first row after key(T)", one
request with ``top=1`` however long the stream is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.data.tables import EdmType, EntityProperty, TableClient, TableServiceClient, UpdateMode

from vault_core.pageblob import CommitState, CommittedBatch
from vault_core.translation import create_if_missing, translate_errors

_MAX48 = (1 << 48) - 1
CATALOG_PARTITION = "stream"
_TRANSACTION_LIMIT = 100  # Azure Tables' maximum operations per entity-group transaction


@dataclass(frozen=True)
class IndexPoint:
    """A record boundary: the record at ``offset`` has ``timestamp`` and ``count`` records before it."""

    offset: int
    timestamp: int
    count: int


@dataclass(frozen=True)
class CatalogEntry:
    stream: str
    committed: int
    count: int
    first_ts: int | None
    last_ts: int | None
    created: int
    updated: int


def _offset_key(offset: int) -> str:
    return f"o{offset:016x}"


def _time_key(ts: int, offset: int) -> str:
    return f"t{_MAX48 - ts:012x}{_MAX48 - offset:012x}"


def _i64(value: int) -> EntityProperty:
    # Offsets and epoch milliseconds exceed Int32, which the SDK would otherwise pick.
    return EntityProperty(value, EdmType.INT64)


def _num(value: Any) -> int:
    # Int64 columns may come back wrapped in an EntityProperty, depending on SDK version.
    return int(getattr(value, "value", value))


def _opt(value: Any) -> int | None:
    return None if value is None else _num(value)


def _point(entity: dict[str, Any]) -> IndexPoint:
    return IndexPoint(_num(entity["Offset"]), _num(entity["Ts"]), _num(entity["Count"]))


class IndexTables:
    """Catalog and index for every stream of one vault."""

    def __init__(self, service: TableServiceClient, prefix: str = "mv") -> None:
        self.service = service
        self.catalog: TableClient = service.get_table_client(f"{prefix}catalog")
        self.index: TableClient = service.get_table_client(f"{prefix}index")

    def ensure_tables(self) -> None:
        create_if_missing(self.catalog.create_table, self.index.create_table)

    # -- writes (idempotent upserts; safe to repeat after a crash) ----------------------
    def record_commit(
        self,
        stream: str,
        state: CommitState,
        points: Sequence[IndexPoint],
        batches: Iterable[CommittedBatch],
        now_ms: int,
    ) -> None:
        """Index rows and batch ids of a commit, then the catalog row."""
        self.record_index(stream, points, batches)
        entry: dict[str, Any] = {
            "PartitionKey": CATALOG_PARTITION,
            "RowKey": stream,
            "Committed": _i64(state.committed),
            "Count": _i64(state.count),
            "Updated": _i64(now_ms),
        }
        if state.first_ts is not None:
            entry["FirstTs"] = _i64(state.first_ts)
        if state.last_ts is not None:
            entry["LastTs"] = _i64(state.last_ts)
        with translate_errors(stream):
            self.catalog.upsert_entity(entry, mode=UpdateMode.MERGE)

    def record_index(
        self, stream: str, points: Sequence[IndexPoint], batches: Iterable[CommittedBatch]
    ) -> None:
        """Upsert index points and committed batch ids, 100 rows per transaction."""
        rows: list[dict[str, Any]] = []
        for p in points:
            fields = {"Offset": _i64(p.offset), "Ts": _i64(p.timestamp), "Count": _i64(p.count)}
            rows.append({"PartitionKey": stream, "RowKey": _offset_key(p.offset), **fields})
            rows.append({"PartitionKey": stream, "RowKey": _time_key(p.timestamp, p.offset), **fields})
        for b in batches:
            rows.append(
                {
                    "PartitionKey": stream,
                    "RowKey": "b" + b.batch_id,
                    "First": _i64(b.first_offset),
                    "Next": _i64(b.next_offset),
                    "Count": _i64(b.count),
                    "Ts": _i64(b.timestamp),
                }
            )
        with translate_errors(stream):
            for i in range(0, len(rows), _TRANSACTION_LIMIT):
                chunk = rows[i : i + _TRANSACTION_LIMIT]
                self.index.submit_transaction(
                    [("upsert", row, {"mode": UpdateMode.REPLACE}) for row in chunk]
                )

    def register_stream(self, stream: str, now_ms: int) -> None:
        """Create the catalog row with its creation time, if it is not there yet."""
        with translate_errors(stream):
            try:
                self.catalog.create_entity(
                    {
                        "PartitionKey": CATALOG_PARTITION,
                        "RowKey": stream,
                        "Created": _i64(now_ms),
                        "Updated": _i64(now_ms),
                        "Committed": _i64(0),
                        "Count": _i64(0),
                    }
                )
            except ResourceExistsError:
                pass

    # -- reads ---------------------------------------------------------------------------
    def last_point(self, stream: str) -> IndexPoint | None:
        return self._first(stream, "t", "u")

    def point_before_time(self, stream: str, timestamp: int) -> IndexPoint | None:
        """The latest index point whose timestamp is strictly before ``timestamp``."""
        if timestamp <= 0:
            return None
        return self._first(stream, _time_key(timestamp - 1, _MAX48), "u")

    def point_at_or_before(
        self, stream: str, offset: int, within: int = 8 * 1024 * 1024
    ) -> IndexPoint | None:
        """The last index point at or before ``offset``, if one lies within ``within`` bytes of it.

        Points are about one index spacing apart (1 MiB, plus at most one record), so the
        window holds a few rows; a stream whose index is missing there gets None.
        """
        found = self.points(stream, max(0, offset - within), offset + 1)
        return found[-1] if found else None

    def points(self, stream: str, start: int = 0, end: int | None = None) -> list[IndexPoint]:
        """Index points with ``start <= offset < end``, ascending (for planning parallel reads)."""
        upper = _offset_key(end) if end is not None else "p"
        filt = "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi"
        params = {"pk": stream, "lo": _offset_key(start), "hi": upper}
        with translate_errors(stream):
            return [_point(e) for e in self.index.query_entities(filt, parameters=params)]

    def committed_batches(self, stream: str, batch_ids: Sequence[str]) -> dict[str, CommittedBatch]:
        """Which of ``batch_ids`` are already committed to ``stream``, with their offsets."""
        found: dict[str, CommittedBatch] = {}
        unique = list(dict.fromkeys(batch_ids))
        with translate_errors(stream):
            for i in range(0, len(unique), 15):  # keep each filter well under the URL limit
                chunk = unique[i : i + 15]
                params: dict[str, Any] = {"pk": stream}
                ors = []
                for j, bid in enumerate(chunk):
                    params[f"r{j}"] = "b" + bid
                    ors.append(f"RowKey eq @r{j}")
                # The SDK substitutes @names only when they stand between spaces.
                filt = f"PartitionKey eq @pk and ( {' or '.join(ors)} )"
                for e in self.index.query_entities(filt, parameters=params):
                    bid = str(e["RowKey"])[1:]
                    found[bid] = CommittedBatch(
                        bid, _num(e["First"]), _num(e["Next"]), _num(e["Count"]), _num(e["Ts"])
                    )
        return found

    def catalog_entry(self, stream: str) -> CatalogEntry | None:
        with translate_errors(stream):
            rows = list(
                self.catalog.query_entities(
                    "PartitionKey eq @pk and RowKey eq @rk",
                    parameters={"pk": CATALOG_PARTITION, "rk": stream},
                )
            )
        return _catalog(rows[0]) if rows else None

    def list_catalog(self) -> list[CatalogEntry]:
        with translate_errors():
            rows = self.catalog.query_entities("PartitionKey eq @pk", parameters={"pk": CATALOG_PARTITION})
            return [_catalog(e) for e in rows]

    def _first(self, stream: str, lo: str, hi: str) -> IndexPoint | None:
        filt = "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi"
        with translate_errors(stream):
            pages = self.index.query_entities(
                filt, parameters={"pk": stream, "lo": lo, "hi": hi}, results_per_page=1
            ).by_page()
            for page in pages:
                for entity in page:
                    return _point(entity)
                return None
        return None


def _catalog(e: dict[str, Any]) -> CatalogEntry:
    return CatalogEntry(
        stream=str(e["RowKey"]),
        committed=_num(e.get("Committed", 0)),
        count=_num(e.get("Count", 0)),
        first_ts=_opt(e.get("FirstTs")),
        last_ts=_opt(e.get("LastTs")),
        created=_num(e.get("Created", 0)),
        updated=_num(e.get("Updated", 0)),
    )
