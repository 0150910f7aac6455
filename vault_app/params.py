"""The exact forms the API takes in query parameters and headers, stated once.

The handlers check what they receive against these, and :mod:`vault_app.openapi` publishes the
same patterns, so the document and the app agree on what is valid: a value a generated client
or validator accepts is one the app accepts, and the other way round. Python's own parsers are
more lenient than the document can say (``int(" 1_0")`` is 10, ``float("1_0")`` too, ``\\d``
takes any script's digits, ``fromisoformat`` takes week dates on 3.11): each value is matched
here first and parsed second.
"""

from __future__ import annotations

import re

INTEGER = r"-?[0-9]{1,20}"
"""An integer query parameter (its range is checked after parsing)."""
NUMBER = r"-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?"
"""A number of seconds (``wait``): decimal, as clients print floats."""
MILLIS = r"-?[0-9]{1,20}"
ISO_TIME = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]{1,6})?)?([Zz]|[+-][0-9]{2}:?[0-9]{2})?)?"
)
TIME = f"{MILLIS}|{ISO_TIME}"
"""``at``: milliseconds since the epoch, or an ISO 8601 date or date and time (UTC unless it
names a zone)."""
RANGE = r"bytes=([0-9]{0,19})-([0-9]{0,19})"
"""``Range``: one range of bytes (``bytes=a-b``, ``bytes=a-`` or the last ``n``: ``bytes=-n``)."""
IDEMPOTENCY_KEY_MAX = 200
MAX_OFFSET = 2**62
"""Largest ``from``: past any stream, and small enough to stay a 64-bit integer everywhere."""
READ_ENCODINGS = ("utf-8", "base64")
"""``encoding`` of a read: ``base64`` never returns values as text."""

_INTEGER = re.compile(INTEGER)
_NUMBER = re.compile(NUMBER)
_TIME = re.compile(TIME)


def is_integer(raw: str) -> bool:
    return _INTEGER.fullmatch(raw) is not None


def is_number(raw: str) -> bool:
    return _NUMBER.fullmatch(raw) is not None


def is_time(raw: str) -> bool:
    return _TIME.fullmatch(raw) is not None


def anchored(pattern: str) -> str:
    """A pattern as OpenAPI (ECMA 262) matches it: anywhere unless anchored."""
    return f"^(?:{pattern})$"
