"""Times as the vault takes them from people and programs: one parser for the API's ``?at=``,
the Spark options ``fromTime``/``toTime`` and the client's ``at=``/``--at``.

A time is milliseconds since the Unix epoch (an integer, or its digits as text), ISO 8601 text,
or a ``datetime``; without a time zone it is UTC.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from vault_core.errors import InvalidInput

_MILLIS = re.compile(r"-?\d{1,20}")
"""Up to 20 digits: past any time a record can carry, and a hostile 5,000-digit number is
refused before Python converts it (which costs time quadratic in its length)."""


def to_millis(when: int | str | datetime) -> int:
    """Milliseconds since the epoch; raises :class:`InvalidInput` for anything that is not a time."""
    if isinstance(when, bool):
        raise InvalidInput(f"not a time: {when!r}")
    if isinstance(when, int):
        return when
    if isinstance(when, str):
        text = when.strip()
        if _MILLIS.fullmatch(text):
            return int(text)
        try:
            # Python 3.10's fromisoformat does not know the "Z" suffix.
            when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise InvalidInput(
                f"time {shown!r} is neither milliseconds since the epoch (up to 20 digits) nor ISO 8601 "
                "(2026-11-22T06:00:00Z)"
            ) from None
    if not isinstance(when, datetime):
        raise InvalidInput(f"not a time: {when!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        return int(when.timestamp() * 1000)
    except (OverflowError, ValueError, OSError):
        raise InvalidInput(f"time {when.isoformat()!r} is out of range") from None
