"""Azurite's well-known development account: its connection string, without the storage SDKs.

Apart from :mod:`vault_core.azure` (which re-exports it) so that what only needs the string, such
as the local tools that start Azurite (``vault_local.azurite``, the demo), does not import the SDKs
to format it: over half a CPU-second.
"""

from __future__ import annotations

AZURITE_CONNECTION_STRING = (
    # Azurite's well-known development account: public, documented, local only.
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "BlobEndpoint=http://127.0.0.1:{blob}/devstoreaccount1;"
    "QueueEndpoint=http://127.0.0.1:{queue}/devstoreaccount1;"
    "TableEndpoint=http://127.0.0.1:{table}/devstoreaccount1;"
)


def azurite_connection_string(blob: int = 10000, queue: int = 10001, table: int = 10002) -> str:
    return AZURITE_CONNECTION_STRING.format(blob=blob, queue=queue, table=table)
