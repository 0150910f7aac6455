"""Table rows as the vault uses them, and the interface of a table: pure, no SDK.

The catalog and index (:mod:`vault_core.index`), the checkpoints (:mod:`vault_core.checkpoints`)
and the batch status rows (:mod:`vault_app.batches`) are written through :class:`Table` alone:
:class:`vault_core.tables.AzureTable` in Azure Tables, :class:`vault_core.memory.MemoryTable` in
memory. ``tests/test_contracts.py`` runs one contract against both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Value = int | str | bool
Fields = Mapping[str, Value]

TRANSACTION_LIMIT = 100
"""Azure Tables' maximum operations per entity-group transaction."""


@dataclass(frozen=True)
class Row:
    """One entity: its keys, its fields and the ETag it was read or written with."""

    partition: str
    key: str
    fields: dict[str, Value] = field(default_factory=dict)
    etag: str = ""

    def get(self, name: str, default: Value | None = None) -> Value | None:
        return self.fields.get(name, default)

    def number(self, name: str, default: int = 0) -> int:
        value = self.fields.get(name)
        return default if value is None else int(value)

    def optional_number(self, name: str) -> int | None:
        value = self.fields.get(name)
        return None if value is None or value == "" else int(value)

    def text(self, name: str, default: str = "") -> str:
        value = self.fields.get(name)
        return default if value is None else str(value)


@dataclass(frozen=True)
class KeyRange:
    """The rows of one partition (of every partition if None) with ``lo <= key < hi``; a bound
    that is None is open. What :meth:`Table.query` reads."""

    partition: str | None = None
    lo: str | None = None
    hi: str | None = None

    def contains(self, partition: str, key: str) -> bool:
        return (
            (self.partition is None or partition == self.partition)
            and (self.lo is None or key >= self.lo)
            and (self.hi is None or key < self.hi)
        )


EVERY_ROW = KeyRange()


class Table(Protocol):
    """One table: rows keyed by (partition, key), kept in key order within a partition."""

    @property
    def name(self) -> str: ...

    def create_if_missing(self) -> None: ...

    def get(self, partition: str, key: str) -> Row | None:
        """The row, or None if there is no such row (or no table yet)."""
        ...

    def query(self, where: KeyRange = EVERY_ROW, *, top: int | None = None) -> list[Row]:
        """The rows in ``where``, ascending by partition then key; with ``top``, only the first
        ``top``. Raises NotFound if there is no table."""
        ...

    def rows(self, partition: str, keys: Sequence[str]) -> list[Row]:
        """The rows of ``partition`` with these keys, those that exist."""
        ...

    def insert(self, partition: str, key: str, fields: Fields) -> str | None:
        """Create the row; its ETag, or None if the row exists already (it is left as it is)."""
        ...

    def upsert(self, partition: str, key: str, fields: Fields, *, merge: bool = True) -> str:
        """Write the row whether or not it exists: ``merge`` keeps the fields not given."""
        ...

    def update(
        self, partition: str, key: str, fields: Fields, *, etag: str | None = None, merge: bool = True
    ) -> str | None:
        """Change an existing row (only if it is still at ``etag``, when given); its new ETag, or
        None if there is no such row or it changed since ``etag``."""
        ...

    def delete(self, partition: str, key: str) -> None:
        """Remove the row; one that is not there is fine."""
        ...

    def replace_all(self, partition: str, rows: Sequence[tuple[str, Fields]]) -> None:
        """Upsert (replace) rows of one partition, in transactions of TRANSACTION_LIMIT."""
        ...
