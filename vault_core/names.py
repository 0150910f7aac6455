"""Stream and batch names: a safe character set, checked before any storage call.

A stream name is 1-128 characters from ``A-Z a-z 0-9 . _ -``, starting with a letter or
digit. It becomes a blob name (no ``/``, so a stream cannot reach another stream's blob
or the claim-check container) and a Table partition key (none of ``/ \\ # ?`` or control
characters, which Tables forbid).
"""

from __future__ import annotations

import re

from vault_core.errors import InvalidInput, InvalidStreamName

STREAM_NAME_MAX = 128
_STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

BATCH_ID_MAX = 64
_BATCH_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_PRODUCER_BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def validate_stream_name(name: str) -> str:
    """Return ``name`` if it is a valid stream name, else raise :class:`InvalidStreamName`."""
    if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
        raise InvalidStreamName(
            f"invalid stream name {name!r}: use 1-{STREAM_NAME_MAX} characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return name


def validate_batch_id(batch_id: str) -> str:
    """Batch ids travel in blob metadata and Table row keys: 1-64 of ``A-Z a-z 0-9 . _ -``.

    The ids a producer picks never contain ``.`` (:func:`validate_producer_batch_id`); the
    ids the vault assigns always do, so the two can never name the same batch.
    """
    if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
        raise InvalidInput(
            f"invalid batch id {batch_id!r}: use 1-{BATCH_ID_MAX} characters from A-Z a-z 0-9 . _ -"
        )
    return batch_id


def validate_producer_batch_id(batch_id: str) -> str:
    """A producer's own ``batch_id``: 1-64 of ``A-Z a-z 0-9 _ -`` (no ``.``, see above)."""
    if not isinstance(batch_id, str) or not _PRODUCER_BATCH_ID.fullmatch(batch_id):
        raise InvalidInput(
            f"invalid batch id {batch_id!r}: use 1-{BATCH_ID_MAX} characters from A-Z a-z 0-9 _ -"
        )
    return batch_id
