"""The interface of a storage queue (the staging queues and their poison queues): pure, no SDK.

The HTTP tier sends staged batches through :class:`MessageQueue`; the writer function drains,
hides and deletes them; poison replay peeks and receives. Implementations:
:class:`vault_core.queues.Queue` (Azure Storage Queues) and :class:`vault_core.memory.MemoryQueue`
(in memory). ``tests/test_contracts.py`` runs one contract against both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass
class QueuedMessage:
    """A message received or peeked from a queue. ``receipt`` (received messages only) changes
    every time the message's visibility is changed."""

    id: str
    body: str
    receipt: str = ""
    inserted: datetime | None = None
    dequeue_count: int = 0
    """How many times the message has been received, this time included (0: peeked or sent)."""


class MessageQueue(Protocol):
    """One queue of text messages. Delivery is at least once and roughly oldest first, never
    strictly in order: a received message comes back after its visibility ends unless deleted."""

    @property
    def name(self) -> str: ...

    def create_if_missing(self) -> None:
        """Create the queue; idempotent."""
        ...

    def send(self, text: str, *, visible_in: int = 0, retry: bool = True) -> QueuedMessage:
        """Add a message, visible after ``visible_in`` seconds; it never expires; without
        ``retry``, one attempt only (a caller with another queue to try). Not idempotent:
        sending twice stores two messages. A queue that does not exist is infrastructure missing:
        :class:`~vault_core.errors.StorageUnavailable`. Returns the message with a receipt, so
        the sender may hide or delete it as if it had received it (dequeue count 0)."""
        ...

    def receive(self, count: int, visibility: int, *, retry: bool = True) -> list[QueuedMessage]:
        """Up to ``count`` visible messages, each now invisible to others for ``visibility``
        seconds and carrying a fresh ``receipt``; none from a queue that does not exist;
        without ``retry``, one attempt only."""
        ...

    def peek(self, count: int) -> list[QueuedMessage]:
        """Up to ``count`` visible messages, read-only (no receipt, visibility unchanged); none
        from a queue that does not exist."""
        ...

    def hide(self, message: QueuedMessage, seconds: int, *, retry: bool = True) -> None:
        """Make a received message invisible for ``seconds`` from now (0: visible again at once);
        its ``receipt`` becomes the new one; without ``retry``, one attempt only. A stale receipt
        (the message was received or hidden again since): a
        :class:`~vault_core.errors.StorageFailure` (``PopReceiptMismatch``); a message that is
        gone: :class:`~vault_core.errors.NotFound`."""
        ...

    def delete(self, message: QueuedMessage, *, retry: bool = True) -> None:
        """Delete a received message; a stale receipt or a message gone raise as in :meth:`hide`;
        without ``retry``, one attempt only."""
        ...

    def approximate_count(self, *, retry: bool = True) -> int | None:
        """About how many messages the queue holds, visible or not; without ``retry``, one
        attempt only. A queue that does not exist: :class:`~vault_core.errors.NotFound`."""
        ...
