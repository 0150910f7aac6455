"""The adapter for one storage queue (a :class:`~vault_core.queueing.MessageQueue`): the staging
queues and their poison queues.

Every message the vault sends never expires (a time-to-live of -1; the service default is seven
days): a staged batch waits for its writer however long that takes.
"""

from __future__ import annotations

from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueMessage

from vault_core.errors import StorageUnavailable
from vault_core.queueing import QueuedMessage
from vault_core.translation import create_if_missing, translate_errors


def _message(m: QueueMessage) -> QueuedMessage:
    return QueuedMessage(str(m.id), str(m.content), m.pop_receipt or "", m.inserted_on, m.dequeue_count or 0)


class Queue:
    """A queue in Azure Storage (a :class:`~vault_core.queueing.MessageQueue`)."""

    def __init__(self, client: QueueClient) -> None:
        self.client = client
        self.name: str = client.queue_name

    def create_if_missing(self) -> None:
        create_if_missing(self.client.create_queue)

    def send(self, text: str, *, visible_in: int = 0, retry: bool = True) -> QueuedMessage:
        """Add a message, visible after ``visible_in`` seconds; it never expires. Without
        ``retry``, one attempt only (a caller with another queue to try).

        A queue that does not exist is infrastructure missing: :class:`StorageUnavailable`.
        """
        options: dict[str, Any] = {} if retry else {"retry_total": 0}
        with translate_errors():
            try:
                sent = self.client.send_message(
                    text, visibility_timeout=visible_in or None, time_to_live=-1, **options
                )
            except ResourceNotFoundError as exc:
                raise StorageUnavailable(f"queue {self.name!r} does not exist") from exc
        return QueuedMessage(str(sent.id), text, sent.pop_receipt or "", sent.inserted_on)

    def receive(self, count: int, visibility: int, *, retry: bool = True) -> list[QueuedMessage]:
        """Up to ``count`` messages in one request, each invisible to others for ``visibility``
        seconds; none from a queue that does not exist; without ``retry``, one attempt only."""
        options: dict[str, Any] = {} if retry else {"retry_total": 0}
        with translate_errors():
            try:
                pages = self.client.receive_messages(
                    messages_per_page=count, visibility_timeout=visibility, **options
                ).by_page()
                return [_message(m) for m in next(pages, [])]
            except ResourceNotFoundError:
                return []

    def peek(self, count: int) -> list[QueuedMessage]:
        """Up to ``count`` of the oldest messages, read-only (no receipt); none from a missing queue."""
        with translate_errors():
            try:
                return [_message(m) for m in self.client.peek_messages(max_messages=count)]
            except ResourceNotFoundError:
                return []

    def hide(self, message: QueuedMessage, seconds: int, *, retry: bool = True) -> None:
        """Make a received message invisible for ``seconds`` from now (0: visible again at once);
        its ``receipt`` becomes the new one; without ``retry``, one attempt only."""
        options: dict[str, Any] = {} if retry else {"retry_total": 0}
        with translate_errors():
            result = self.client.update_message(
                message.id, message.receipt, visibility_timeout=seconds, **options
            )
        message.receipt = result.pop_receipt or message.receipt

    def delete(self, message: QueuedMessage, *, retry: bool = True) -> None:
        options: dict[str, Any] = {} if retry else {"retry_total": 0}
        with translate_errors():
            self.client.delete_message(message.id, message.receipt, **options)

    def approximate_count(self, *, retry: bool = True) -> int | None:
        """The service's approximate message count; without ``retry``, one attempt only."""
        options: dict[str, Any] = {} if retry else {"retry_total": 0}
        with translate_errors():
            count = self.client.get_queue_properties(**options).approximate_message_count
        return None if count is None else int(count)
