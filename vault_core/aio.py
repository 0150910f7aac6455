"""The async storage calls of the request path: what a request makes while it *waits*.

A long poll (``GET .../messages?wait=``, ``POST ...?wait=``) and a health probe must cost a
coroutine, not a thread: so the calls they repeat or make in parallel (a stream's commit record,
a queue's length) go through the SDKs' async clients here, on the worker's event loop. The rest
of a request (one read, one staging) stays in :mod:`vault_core`'s synchronous code, shared with
the writer, Spark and the client, and runs in a thread.

Async clients belong to the event loop that made them (their HTTP session does), so
:func:`async_clients` keeps one set per loop and account. SDK errors are translated by the same
:func:`vault_core.azure.translate_errors` as everywhere else, and every attempt obeys the
request's storage budget (:mod:`vault_core.retry`). No SDK retries: a waiting caller polls again
anyway, and a probe reports what it saw.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from azure.core.credentials import AccessToken
from azure.storage.blob.aio import BlobServiceClient

from vault_core.azure import StorageAccount, translate_errors
from vault_core.errors import VaultError
from vault_core.pagelog import CommitState
from vault_core.retry import request_hook

if TYPE_CHECKING:
    from azure.storage.queue.aio import QueueServiceClient

_OPTIONS: dict[str, Any] = {"retry_total": 0, "raw_request_hook": request_hook}


class _AsyncTokenCredential:
    """The account's (synchronous) identity credential, usable by the async clients.

    Tokens are cached by the credential and live about an hour, so the thread this borrows to
    fetch one is rarely needed; one credential, one token cache, for both kinds of client.
    """

    def __init__(self, credential: Any) -> None:
        self._credential = credential

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        token: AccessToken = await asyncio.to_thread(self._credential.get_token, *scopes, **kwargs)
        return token

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> _AsyncTokenCredential:
        return self

    async def __aexit__(self, *args: object) -> None:
        return None


class AsyncReads(Protocol):
    """What the request path's waits read, as coroutines (Azure: :class:`AsyncClients`; in
    memory: :class:`vault_core.memory.MemoryAsyncReads`)."""

    async def commit_state(self, container: str, stream: str) -> CommitState: ...

    async def commit_states(self, container: str, most: int) -> dict[str, CommitState]: ...

    async def queue_length(self, queue: str) -> int: ...


@dataclass
class AsyncClients:
    """One account's async clients, for one event loop."""

    blobs: BlobServiceClient
    queues: QueueServiceClient

    async def commit_state(self, container: str, stream: str) -> CommitState:
        """The stream's commit record (its blob's metadata): one ``Get Blob Properties``."""
        with translate_errors(stream):
            props = await self.blobs.get_blob_client(container, stream).get_blob_properties()
        return CommitState.from_metadata(dict(props.metadata or {}), props.etag, props.size)

    async def commit_states(self, container: str, most: int) -> dict[str, CommitState]:
        """Every stream's commit record from one listing (blob metadata), at most ``most`` + 1
        of them: a caller that gets more knows the container is too big to list this way."""
        found: dict[str, CommitState] = {}
        with translate_errors():
            async for b in self.blobs.get_container_client(container).list_blobs(include=["metadata"]):
                try:
                    found[b.name] = CommitState.from_metadata(dict(b.metadata or {}), b.etag, b.size)
                except VaultError:
                    continue  # not a stream of a format this reader knows: nobody waits on it here
                if len(found) > most:
                    break
        return found

    async def queue_length(self, queue: str) -> int:
        """The queue's approximate message count: one ``Get Queue Metadata``."""
        with translate_errors():
            props = await self.queues.get_queue_client(queue).get_queue_properties()
        return int(props.approximate_message_count or 0)


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[StorageAccount, AsyncClients]] = (
    weakref.WeakKeyDictionary()
)


def async_clients(account: StorageAccount) -> AsyncClients:
    """The account's async clients on the running event loop (made on first use)."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get(account)
    if found is None:
        found = per_loop[account] = _make(account)
    return found


async def close_async_clients() -> None:
    """Close the running event loop's async clients (their HTTP sessions): for a loop that ends
    before its process does (``asyncio.run`` in a script or test). A server's loop lives as long
    as its process and needs no call."""
    for clients in _clients.pop(asyncio.get_running_loop(), {}).values():
        await clients.blobs.close()
        await clients.queues.close()


def _make(account: StorageAccount) -> AsyncClients:
    # Imported here: azure-storage-queue is the core's "queue" extra (the Function App's).
    from azure.storage.queue.aio import QueueServiceClient

    if account.connection_string:
        return AsyncClients(
            BlobServiceClient.from_connection_string(account.connection_string, **_OPTIONS),
            QueueServiceClient.from_connection_string(account.connection_string, **_OPTIONS),
        )
    credential = _AsyncTokenCredential(account.credential)
    return AsyncClients(
        BlobServiceClient(account.service_url("blob"), credential=credential, **_OPTIONS),
        QueueServiceClient(account.service_url("queue"), credential=credential, **_OPTIONS),
    )
