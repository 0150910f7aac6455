"""The adapter for one Azure Table (a :class:`vault_core.rows.Table`).

Integers are stored as Int64 (offsets and epoch milliseconds do not fit the Int32 the SDK would
pick) and read back as ``int`` whichever way they were stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import EdmType, EntityProperty, TableClient, UpdateMode

from vault_core.rows import EVERY_ROW, TRANSACTION_LIMIT, Fields, KeyRange, Row, Value
from vault_core.translation import create_if_missing, translate_errors

KEYS_PER_QUERY = 15
"""Row keys per ``or`` filter: keeps each query's URL well under the service's limit."""


def _value(value: Any) -> Value:
    # Int64 columns come back wrapped in an EntityProperty, depending on SDK version.
    raw = getattr(value, "value", value)
    return raw if isinstance(raw, (bool, str)) else int(raw) if isinstance(raw, int) else str(raw)


def _row(entity: Any) -> Row:
    fields = {k: _value(v) for k, v in entity.items() if k not in ("PartitionKey", "RowKey")}
    etag = entity.metadata.get("etag", "") if hasattr(entity, "metadata") else ""
    return Row(str(entity["PartitionKey"]), str(entity["RowKey"]), fields, str(etag or ""))


def _entity(partition: str, key: str, fields: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {"PartitionKey": partition, "RowKey": key}
    for name, value in fields.items():
        is_int = isinstance(value, int) and not isinstance(value, bool)
        out[name] = EntityProperty(value, EdmType.INT64) if is_int else value
    return out


class AzureTable:
    """One table in Azure Tables. Safe to share between threads."""

    def __init__(self, client: TableClient) -> None:
        self.client = client
        self.name: str = client.table_name

    def create_if_missing(self) -> None:
        create_if_missing(self.client.create_table)

    # -- reads ---------------------------------------------------------------------------------
    def get(self, partition: str, key: str) -> Row | None:
        """The row, or None if there is no such row (or no table yet)."""
        with translate_errors():
            try:
                return _row(self.client.get_entity(partition, key))
            except ResourceNotFoundError:
                return None

    def query(self, where: KeyRange = EVERY_ROW, *, top: int | None = None) -> list[Row]:
        """The rows in ``where``, ascending; with ``top``, only the first ``top`` (one request)."""
        clauses, params = [], {}
        for clause, name, value in (
            ("PartitionKey eq @pk", "pk", where.partition),
            ("RowKey ge @lo", "lo", where.lo),
            ("RowKey lt @hi", "hi", where.hi),
        ):
            if value is not None:
                clauses.append(clause)
                params[name] = value
        with translate_errors():
            if not clauses:
                return [_row(e) for e in self.client.list_entities()]
            if top is None:
                return [_row(e) for e in self.client.query_entities(" and ".join(clauses), parameters=params)]
            found = self.client.query_entities(" and ".join(clauses), parameters=params, results_per_page=top)
            return [_row(e) for e in next(found.by_page(), [])][:top]

    def rows(self, partition: str, keys: Sequence[str]) -> list[Row]:
        """The rows of ``partition`` with these keys (those that exist), a few keys per request.
        One key (a writer's or a producer's one batch) is a point read: a table's cheapest
        lookup, where a query filters the partition (and Azurite every row of the table)."""
        unique = list(dict.fromkeys(keys))
        if len(unique) == 1:
            row = self.get(partition, unique[0])
            return [] if row is None else [row]
        out: list[Row] = []
        with translate_errors():
            for i in range(0, len(unique), KEYS_PER_QUERY):
                chunk = unique[i : i + KEYS_PER_QUERY]
                params: dict[str, Any] = {"pk": partition}
                params.update((f"r{j}", key) for j, key in enumerate(chunk))
                # The SDK substitutes @names only when they stand between spaces.
                ors = " or ".join(f"RowKey eq @r{j}" for j in range(len(chunk)))
                found = self.client.query_entities(f"PartitionKey eq @pk and ( {ors} )", parameters=params)
                out += [_row(e) for e in found]
        return out

    # -- writes --------------------------------------------------------------------------------
    def insert(self, partition: str, key: str, fields: Fields) -> str | None:
        """Create the row; its ETag, or None if the row exists already (it is left as it is)."""
        with translate_errors():
            try:
                return str(self.client.create_entity(_entity(partition, key, fields))["etag"])
            except ResourceExistsError:
                return None

    def upsert(self, partition: str, key: str, fields: Fields, *, merge: bool = True) -> str:
        """Write the row whether or not it exists: ``merge`` keeps the fields not given."""
        mode = UpdateMode.MERGE if merge else UpdateMode.REPLACE
        with translate_errors():
            return str(self.client.upsert_entity(_entity(partition, key, fields), mode=mode)["etag"])

    def update(
        self, partition: str, key: str, fields: Fields, *, etag: str | None = None, merge: bool = True
    ) -> str | None:
        """Change an existing row (only if it is still at ``etag``, when given); its new ETag, or
        None if there is no such row or it changed since ``etag``."""
        mode = UpdateMode.MERGE if merge else UpdateMode.REPLACE
        condition: dict[str, Any] = (
            {} if etag is None else {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        )
        with translate_errors():
            try:
                result = self.client.update_entity(_entity(partition, key, fields), mode=mode, **condition)
            except (ResourceModifiedError, ResourceNotFoundError):
                return None
            except HttpResponseError as exc:
                if exc.status_code == 412:  # the row changed since ``etag``
                    return None
                raise
        return str(result["etag"])

    def delete(self, partition: str, key: str) -> None:
        """Remove the row; one that is not there is fine."""
        with translate_errors():
            try:
                self.client.delete_entity(partition, key)
            except ResourceNotFoundError:
                pass

    def replace_all(self, partition: str, rows: Sequence[tuple[str, Fields]]) -> None:
        """Upsert (replace) rows of one partition, up to 100 per entity-group transaction."""
        with translate_errors():
            for i in range(0, len(rows), TRANSACTION_LIMIT):
                self.client.submit_transaction(
                    [
                        ("upsert", _entity(partition, key, fields), {"mode": UpdateMode.REPLACE})
                        for key, fields in rows[i : i + TRANSACTION_LIMIT]
                    ]
                )
