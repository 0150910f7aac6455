"""Python client of Message Vault for Azure Functions: producer, consumer, consumer groups, CLI.

Importable without Spark or ``azure.functions``: it talks to the vault's HTTP API (httpx)
and, on the direct read path, to the stream's blob (azure-storage-blob, via vault_core).
"""

from vault_client.api import Access, ApiClient
from vault_client.consumer import Consumer
from vault_client.direct import AccessDenied, DirectSource, SasBlob
from vault_client.errors import (
    ApiError,
    ApiNotFound,
    ApiUnavailable,
    BufferFull,
    EndpointUnreachable,
    Forbidden,
    ProducerClosed,
    Unauthorized,
)
from vault_client.groups import GroupLag, GroupMember, group_lag
from vault_client.producer import Producer, ProducerStats
from vault_client.results import Delivery, SendResult
from vault_client.retry import RetryPolicy
from vault_client.sources import ApiSource, Source
from vault_core.checkpoints import Checkpoint, CheckpointConflict, CheckpointStore
from vault_core.recordformat import Message

__all__ = [
    "Access",
    "AccessDenied",
    "ApiClient",
    "ApiError",
    "ApiNotFound",
    "ApiSource",
    "ApiUnavailable",
    "BufferFull",
    "Checkpoint",
    "CheckpointConflict",
    "CheckpointStore",
    "Consumer",
    "Delivery",
    "DirectSource",
    "EndpointUnreachable",
    "Forbidden",
    "GroupLag",
    "GroupMember",
    "Message",
    "Producer",
    "ProducerClosed",
    "ProducerStats",
    "RetryPolicy",
    "SasBlob",
    "SendResult",
    "Source",
    "Unauthorized",
    "group_lag",
]
