"""The read side of one stream's log, as an interface: all that the readers need of storage.

:class:`vault_core.reader.StreamReader`, :func:`vault_core.reader.scan_log`, the boundary proofs
and ``vault verify`` read a stream through :class:`ReadableLog` alone, so the same code reads:

* :class:`vault_core.pageblob.StreamBlob`: the page blob itself (the server, Spark);
* :class:`vault_client.direct.SasBlob`: the page blob through a SAS that renews itself;
* :class:`vault_client.rawlog.ApiLog`: the raw log route of the HTTP API, ``GET .../log``;

``tests/test_contracts.py`` runs one contract against every implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from vault_core.pageblob import CommitState


class ReadableLog(Protocol):
    """One stream's committed log, read-only. Safe to share between threads."""

    @property
    def stream(self) -> str: ...

    def state(self) -> CommitState:
        """The commit record now (raises StreamNotFound for a stream never written)."""
        ...

    def read(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start+length)`` of the log; the caller keeps the range below ``committed``."""
        ...

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        """Bytes from ``start`` (up to ``length``, fewer at the end of what storage holds, none from
        at or past it) and the commit record, read together: one request where storage allows."""
        ...


LogOpener = Callable[[str], ReadableLog]
"""The log of a stream by name (checking the name): how a reader reaches the streams it reads."""
