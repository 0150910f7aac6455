"""The stream catalog and the sparse offset/time index, in Azure Tables.

Everything here is *derived* data, like Kafka's index files: not checksummed, written after
the blob commit, and rebuilt from the log by the next writer if a crash lost it
(:meth:`vault_core.writer.StreamWriter.open` does that). The log is the truth.

Tables and keys (``<p>`` is the configured prefix, default ``mv``):

``<p>catalog``  PartitionKey ``stream``, RowKey = stream name: committed length, message
                count, first/last timestamp, created/updated.
``<p>index``    PartitionKey = stream name, four row families:
                ``o<offset:016x>``                    an index point, ascending by offset
                ``t<~ts:012x><~offset:012x>``         the same point, *descending* by time
                ``b<batch id>``                       a committed producer batch (exactly-once),
                                                      with its pieces if it is in units
                ``m<minute:012x>``                    the first record of each minute that has
                                                      records (ingest rates, docs/ARCHITECTURE.md §11)

Tables only return rows in ascending key order, so the ``t`` family stores inverted
numbers: "the last point before time T" becomes "the first row after key(T)", one
request with ``top=1`` however long the stream is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from vault_core.pagelog import CommitState, CommittedBatch, Pieces
from vault_core.rows import Fields, KeyRange, Row, Table

_MAX48 = (1 << 48) - 1
CATALOG_PARTITION = "stream"
MINUTE_MS = 60_000
MAX_STORED_PIECES = 1000
"""Pieces a batch row keeps at most (about 24 characters each: well within a Tables property).
A batch of units spans one unit per 1 MiB of payload or 2,048 messages, and more only where its
keys switch between text and binary; a batch of more pieces keeps none (its offsets are then
unknown)."""


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


def offset_key(offset: int) -> str:
    """The row key of an index point in offset order (docs/FORMAT.md §8 spells out every key)."""
    return f"o{offset:016x}"


def time_key(ts: int, offset: int) -> str:
    """The row key of an index point by time, inverted so that the latest comes first (FORMAT.md §8.3)."""
    return f"t{_MAX48 - ts:012x}{_MAX48 - offset:012x}"


def encode_pieces(pieces: Pieces) -> str:
    """``"offset:count,offset:count"``: how a batch row stores its pieces."""
    return ",".join(f"{offset}:{count}" for offset, count in pieces)


def decode_pieces(text: str) -> Pieces:
    return tuple((int(o), int(c)) for o, c in (p.split(":") for p in text.split(","))) if text else ()


def minute_key(ts: int) -> str:
    """The row key of a minute mark: the first record of a minute."""
    return f"m{ts // MINUTE_MS:012x}"


def starts_minute(previous_ts: int | None, ts: int) -> bool:
    """Whether a record stamped ``ts`` is the first of its minute, after one stamped ``previous_ts``
    (None: the stream's first record). Timestamps never go back, so this marks each minute once."""
    return previous_ts is None or ts // MINUTE_MS > previous_ts // MINUTE_MS


def _point(row: Row) -> IndexPoint:
    return IndexPoint(row.number("Offset"), row.number("Ts"), row.number("Count"))


class HasTables(Protocol):
    """Where tables come from: a storage account (or its in-memory twin)."""

    def table(self, name: str) -> Table: ...


class IndexTables:
    """Catalog and index for every stream of one vault."""

    def __init__(self, catalog: Table, index: Table) -> None:
        self.catalog = catalog
        self.index = index

    @classmethod
    def in_account(cls, account: HasTables, prefix: str = "mv") -> IndexTables:
        return cls(account.table(f"{prefix}catalog"), account.table(f"{prefix}index"))

    def ensure_tables(self) -> None:
        self.catalog.create_if_missing()
        self.index.create_if_missing()

    # -- writes (idempotent upserts; safe to repeat after a crash) ----------------------
    def record_commit(
        self,
        stream: str,
        state: CommitState,
        points: Sequence[IndexPoint],
        batches: Iterable[CommittedBatch],
        now_ms: int,
        minutes: Sequence[IndexPoint] = (),
    ) -> None:
        """Index rows and batch ids of a commit, then the catalog row."""
        self.record_index(stream, points, batches, minutes)
        entry: dict[str, int] = {
            "Committed": state.committed,
            "Count": state.count,
            "Format": state.format,  # mv_format: whether the log holds format 2 units
            "Updated": now_ms,
        }
        if state.first_ts is not None:
            entry["FirstTs"] = state.first_ts
        if state.last_ts is not None:
            entry["LastTs"] = state.last_ts
        self.catalog.upsert(CATALOG_PARTITION, stream, entry, merge=True)

    def record_index(
        self,
        stream: str,
        points: Sequence[IndexPoint],
        batches: Iterable[CommittedBatch],
        minutes: Sequence[IndexPoint] = (),
    ) -> None:
        """Upsert minute marks, index points and committed batch ids, 100 rows per transaction.

        Minute marks go first: a recovering writer re-derives them only after the last index
        point it finds, so an index point in Tables must imply the marks written with it."""
        rows: list[tuple[str, Fields]] = []
        for m in minutes:
            rows.append((minute_key(m.timestamp), {"Offset": m.offset, "Ts": m.timestamp, "Count": m.count}))
        for p in points:
            fields = {"Offset": p.offset, "Ts": p.timestamp, "Count": p.count}
            rows.append((offset_key(p.offset), fields))
            rows.append((time_key(p.timestamp, p.offset), fields))
        for b in batches:
            batch: dict[str, int | str] = {
                "First": b.first_offset,
                "Next": b.next_offset,
                "Count": b.count,
                "Ts": b.timestamp,
            }
            if b.pieces and len(b.pieces) <= MAX_STORED_PIECES:
                batch["Pieces"] = encode_pieces(b.pieces)
            rows.append(("b" + b.batch_id, batch))
        self.index.replace_all(stream, rows)

    def register_stream(self, stream: str, now_ms: int) -> None:
        """Create the catalog row with its creation time, if it is not there yet."""
        self.catalog.insert(
            CATALOG_PARTITION, stream, {"Created": now_ms, "Updated": now_ms, "Committed": 0, "Count": 0}
        )

    # -- reads ---------------------------------------------------------------------------
    def last_point(self, stream: str) -> IndexPoint | None:
        return self._first(stream, "t", "u")

    def point_before_time(self, stream: str, timestamp: int) -> IndexPoint | None:
        """The latest index point whose timestamp is strictly before ``timestamp``."""
        if timestamp <= 0:
            return None
        return self._first(stream, time_key(timestamp - 1, _MAX48), "u")

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
        upper = offset_key(end) if end is not None else "p"
        return [_point(r) for r in self.index.query(KeyRange(stream, lo=offset_key(start), hi=upper))]

    def minute_marks(self, stream: str, start_ms: int, end_ms: int) -> list[IndexPoint]:
        """The first record of each minute from ``start_ms``'s minute to ``end_ms``'s, ascending."""
        lo, hi = minute_key(max(0, start_ms)), minute_key(max(0, end_ms) + MINUTE_MS)  # hi: exclusive
        return [_point(r) for r in self.index.query(KeyRange(stream, lo=lo, hi=hi))]

    def committed_batches(self, stream: str, batch_ids: Sequence[str]) -> dict[str, CommittedBatch]:
        """Which of ``batch_ids`` are already committed to ``stream``, with their offsets."""
        found: dict[str, CommittedBatch] = {}
        for r in self.index.rows(stream, ["b" + bid for bid in batch_ids]):
            bid = r.key[1:]
            found[bid] = CommittedBatch(
                bid,
                r.number("First"),
                r.number("Next"),
                r.number("Count"),
                r.number("Ts"),
                decode_pieces(r.text("Pieces")),
            )
        return found

    def catalog_entry(self, stream: str) -> CatalogEntry | None:
        row = self.catalog.get(CATALOG_PARTITION, stream)
        return _catalog(row) if row else None

    def list_catalog(self) -> list[CatalogEntry]:
        return [_catalog(r) for r in self.catalog.query(KeyRange(CATALOG_PARTITION))]

    def _first(self, stream: str, lo: str, hi: str) -> IndexPoint | None:
        found = self.index.query(KeyRange(stream, lo=lo, hi=hi), top=1)
        return _point(found[0]) if found else None


def _catalog(r: Row) -> CatalogEntry:
    return CatalogEntry(
        stream=r.key,
        committed=r.number("Committed"),
        count=r.number("Count"),
        first_ts=r.optional_number("FirstTs"),
        last_ts=r.optional_number("LastTs"),
        created=r.number("Created"),
        updated=r.number("Updated"),
    )
