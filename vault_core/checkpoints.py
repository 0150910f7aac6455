"""Consumer-group checkpoints in Azure Tables: where each group has got to in each stream.

Table ``mvcheckpoints`` (configurable): PartitionKey = group, RowKey = stream, columns
``Offset`` (the next offset the group will read: a record boundary), ``Member`` (who wrote
it last) and ``Updated`` (epoch milliseconds).

Every write is conditional. A member remembers the ETag of the row it read (or wrote last)
and writes ``If-Match`` that ETag, or *create-only* when it saw no row. If another member
of the group wrote in between, the write fails with :class:`CheckpointConflict` instead of
silently moving the group's position backwards or forwards under the other member's feet.
"""

from __future__ import annotations

from dataclasses import dataclass

from vault_core.azure import StorageAccount
from vault_core.errors import InvalidOffset, NotFound, VaultError
from vault_core.index import HasTables
from vault_core.names import validate_group_name, validate_stream_name
from vault_core.rows import Fields, KeyRange, Row, Table

DEFAULT_TABLE = "mvcheckpoints"


class CheckpointConflict(VaultError):
    """The checkpoint changed since this member read it: another member of the group wrote it."""

    def __init__(self, group: str, stream: str, detail: str) -> None:
        super().__init__(
            f"checkpoint of group {group!r} on stream {stream!r} was changed by another member ({detail}); "
            "reload it before committing again"
        )
        self.group = group
        self.stream = stream


@dataclass(frozen=True)
class Checkpoint:
    group: str
    stream: str
    offset: int
    """The next offset the group reads: everything before it is processed."""
    etag: str
    updated: int
    member: str | None = None


def _checkpoint(row: Row) -> Checkpoint:
    return Checkpoint(
        group=row.partition,
        stream=row.key,
        offset=row.number("Offset"),
        etag=row.etag,
        updated=row.number("Updated"),
        member=row.text("Member") or None,
    )


class CheckpointStore:
    """Checkpoints of every consumer group of one vault; safe to share between threads."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._ensured = False

    @classmethod
    def from_account(cls, account: HasTables, table: str = DEFAULT_TABLE) -> CheckpointStore:
        return cls(account.table(table))

    @classmethod
    def from_connection_string(cls, connection_string: str, table: str = DEFAULT_TABLE) -> CheckpointStore:
        return cls.from_account(StorageAccount(connection_string=connection_string), table)

    def ensure(self) -> CheckpointStore:
        """Create the table if it is missing (idempotent)."""
        self.table.create_if_missing()
        self._ensured = True
        return self

    # -- reads -----------------------------------------------------------------------------
    def get(self, group: str, stream: str) -> Checkpoint | None:
        """The group's checkpoint on ``stream``, or None if it never committed one."""
        row = self.table.get(validate_group_name(group), validate_stream_name(stream))
        return None if row is None else _checkpoint(row)  # no row, or no table yet

    def for_stream(self, stream: str, limit: int = 1000) -> list[Checkpoint]:
        """Every group's checkpoint on ``stream`` (at most ``limit``), sorted by group.

        Groups are partitions, so this filter reads the whole table: fine for the few hundred
        rows a vault's consumer groups make, which is what the explorer shows."""
        validate_stream_name(stream)
        try:
            rows = self.table.query(KeyRange(lo=stream, hi=stream + "\x00"))[:limit]  # row key == stream
        except NotFound:
            return []  # no table yet: no group has committed anything
        return sorted((_checkpoint(r) for r in rows), key=lambda c: c.group)

    def list(self, group: str | None = None) -> list[Checkpoint]:
        """Every checkpoint, or one group's, sorted by group then stream."""
        try:
            rows = self.table.query(KeyRange(None if group is None else validate_group_name(group)))
        except NotFound:  # no table yet: no checkpoints
            return []
        return sorted((_checkpoint(r) for r in rows), key=lambda c: (c.group, c.stream))

    # -- conditional writes ------------------------------------------------------------------
    def save(
        self,
        group: str,
        stream: str,
        offset: int,
        *,
        etag: str | None,
        now_ms: int,
        member: str | None = None,
    ) -> Checkpoint:
        """Write the checkpoint if nobody changed it since ``etag`` (None: only if there is none).

        Raises :class:`CheckpointConflict` when the row is not what the caller last saw.
        """
        validate_group_name(group)
        validate_stream_name(stream)
        if offset < 0:
            raise InvalidOffset(f"a checkpoint offset must be >= 0, got {offset}")
        if not self._ensured:
            self.ensure()
        fields: Fields = {"Offset": offset, "Updated": now_ms, "Member": member or ""}
        if etag is None:
            written = self.table.insert(group, stream, fields)
            if written is None:
                raise CheckpointConflict(group, stream, "it was created after this member looked")
        else:
            written = self.table.update(group, stream, fields, etag=etag, merge=False)
            if written is None:
                raise CheckpointConflict(group, stream, "it changed or was deleted since this member read it")
        return Checkpoint(group, stream, offset, written, now_ms, member or None)

    def delete(self, group: str, stream: str) -> None:
        """Forget the group's position on ``stream`` (it starts again from its start option)."""
        self.table.delete(validate_group_name(group), validate_stream_name(stream))
