"""Names the vault takes from callers: streams, consumer groups, batch ids. Each kind is a
character set and a length, checked before any storage call by one helper.

A stream name is 1-128 characters from ``A-Z a-z 0-9 . _ -``, starting with a letter or
digit and not ending with ``.`` (Azure advises against blob names that end with a dot). It
becomes a blob name (no ``/``, so a stream cannot reach another stream's blob
or the claim-check container) and a Table partition key (none of ``/ \\ # ?`` or control
characters, which Tables forbid). A consumer group name follows the same rule: it is a
Table partition key too, and is typed on command lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vault_core.errors import InvalidInput, InvalidStreamName

STREAM_NAME_MAX = 128
GROUP_NAME_MAX = STREAM_NAME_MAX
BATCH_ID_MAX = 64


@dataclass(frozen=True)
class _Kind:
    """One kind of name: what it is called in errors, its pattern, and the rule in words."""

    what: str
    pattern: re.Pattern[str]
    rule: str
    error: type[InvalidInput] = InvalidInput

    def check(self, name: object) -> str:
        if not isinstance(name, str) or not self.pattern.fullmatch(name):
            raise self.error(f"invalid {self.what} {name!r}: use {self.rule}")
        return name


_LEADING_ALNUM = (
    re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{STREAM_NAME_MAX - 1}}}"),
    f"1-{STREAM_NAME_MAX} characters from A-Z a-z 0-9 . _ -, starting with a letter or digit",
)
STREAM_PATTERN = rf"[A-Za-z0-9](?:[A-Za-z0-9._-]{{0,{STREAM_NAME_MAX - 2}}}[A-Za-z0-9_-])?"
"""A stream name as a regular expression (also in the OpenAPI document, anchored)."""
_STREAM = _Kind(
    "stream name",
    re.compile(STREAM_PATTERN),
    f"1-{STREAM_NAME_MAX} characters from A-Z a-z 0-9 . _ -, starting with a letter or digit, "
    "not ending with .",
    error=InvalidStreamName,
)
_GROUP = _Kind("consumer group name", *_LEADING_ALNUM)
BATCH_ID_PATTERN = rf"[A-Za-z0-9._-]{{1,{BATCH_ID_MAX}}}"
PRODUCER_BATCH_ID_PATTERN = rf"[A-Za-z0-9_-]{{1,{BATCH_ID_MAX}}}"
_BATCH_ID = _Kind(
    "batch id",
    re.compile(BATCH_ID_PATTERN),
    f"1-{BATCH_ID_MAX} characters from A-Z a-z 0-9 . _ -",
)
_PRODUCER_BATCH_ID = _Kind(
    "batch id",
    re.compile(PRODUCER_BATCH_ID_PATTERN),
    f"1-{BATCH_ID_MAX} characters from A-Z a-z 0-9 _ -",
)


def validate_stream_name(name: str) -> str:
    """Return ``name`` if it is a valid stream name, else raise :class:`InvalidStreamName`."""
    return _STREAM.check(name)


def validate_group_name(name: str) -> str:
    """Return ``name`` if it is a valid consumer group name, else raise :class:`InvalidInput`."""
    return _GROUP.check(name)


def validate_batch_id(batch_id: str) -> str:
    """Batch ids travel in blob metadata and Table row keys: 1-64 of ``A-Z a-z 0-9 . _ -``.

    The ids a producer picks never contain ``.`` (:func:`validate_producer_batch_id`); the
    ids the vault assigns always do, so the two can never name the same batch.
    """
    return _BATCH_ID.check(batch_id)


def validate_producer_batch_id(batch_id: str) -> str:
    """A producer's own ``batch_id``: 1-64 of ``A-Z a-z 0-9 _ -`` (no ``.``, see above)."""
    return _PRODUCER_BATCH_ID.check(batch_id)
