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
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.data.tables import EdmType, EntityProperty, TableClient, TableServiceClient, UpdateMode

from vault_core.azure import StorageAccount, create_if_missing, translate_errors
from vault_core.errors import InvalidOffset, VaultError
from vault_core.names import validate_group_name, validate_stream_name

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


def _num(value: Any) -> int:
    return int(getattr(value, "value", value))


def _checkpoint(entity: Any) -> Checkpoint:
    meta = entity.metadata
    return Checkpoint(
        group=str(entity["PartitionKey"]),
        stream=str(entity["RowKey"]),
        offset=_num(entity["Offset"]),
        etag=str(meta["etag"]),
        updated=_num(entity.get("Updated", 0)),
        member=entity.get("Member") or None,
    )


class CheckpointStore:
    """Checkpoints of every consumer group of one vault; safe to share between threads."""

    def __init__(self, service: TableServiceClient, table: str = DEFAULT_TABLE) -> None:
        self.table_name = table
        self.table: TableClient = service.get_table_client(table)
        self._ensured = False

    @classmethod
    def from_account(cls, account: StorageAccount, table: str = DEFAULT_TABLE) -> CheckpointStore:
        return cls(account.table_service(), table)

    @classmethod
    def from_connection_string(cls, connection_string: str, table: str = DEFAULT_TABLE) -> CheckpointStore:
        return cls.from_account(StorageAccount(connection_string=connection_string), table)

    def ensure(self) -> CheckpointStore:
        """Create the table if it is missing (idempotent)."""
        create_if_missing(self.table.create_table)
        self._ensured = True
        return self

    # -- reads -----------------------------------------------------------------------------
    def get(self, group: str, stream: str) -> Checkpoint | None:
        """The group's checkpoint on ``stream``, or None if it never committed one."""
        validate_group_name(group)
        validate_stream_name(stream)
        with translate_errors(stream):
            try:
                return _checkpoint(self.table.get_entity(group, stream))
            except ResourceNotFoundError:  # no row, or no table yet: both mean "no checkpoint"
                return None

    def list(self, group: str | None = None) -> list[Checkpoint]:
        """Every checkpoint, or one group's, sorted by group then stream."""
        with translate_errors():
            try:
                if group is None:
                    rows = list(self.table.list_entities())
                else:
                    rows = list(
                        self.table.query_entities(
                            "PartitionKey eq @pk", parameters={"pk": validate_group_name(group)}
                        )
                    )
            except ResourceNotFoundError:
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
        entity = {
            "PartitionKey": group,
            "RowKey": stream,
            # Offsets and epoch milliseconds exceed Int32, which the SDK would otherwise pick.
            "Offset": EntityProperty(offset, EdmType.INT64),
            "Updated": EntityProperty(now_ms, EdmType.INT64),
            "Member": member or "",
        }
        with translate_errors(stream):
            try:
                if etag is None:
                    result = self.table.create_entity(entity)
                else:
                    result = self.table.update_entity(
                        entity,
                        mode=UpdateMode.REPLACE,
                        etag=etag,
                        match_condition=MatchConditions.IfNotModified,
                    )
            except ResourceExistsError as exc:
                raise CheckpointConflict(group, stream, "it was created after this member looked") from exc
            except ResourceNotFoundError as exc:
                raise CheckpointConflict(group, stream, "it was deleted") from exc
            except HttpResponseError as exc:
                if exc.status_code == 412:
                    raise CheckpointConflict(group, stream, "its ETag no longer matches") from exc
                raise
        return Checkpoint(group, stream, offset, str(result["etag"]), now_ms, member or None)

    def delete(self, group: str, stream: str) -> None:
        """Forget the group's position on ``stream`` (it starts again from its start option)."""
        with translate_errors(stream):
            try:
                self.table.delete_entity(validate_group_name(group), validate_stream_name(stream))
            except ResourceNotFoundError:
                pass
