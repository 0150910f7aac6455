"""Shared fixtures: one real Azurite for the session, started and stopped by the tests."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from vault_core.azure import StorageAccount
from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.process import HostProcess


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    server = Azurite().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def account(azurite: Azurite) -> StorageAccount:
    return StorageAccount(connection_string=azurite.connection_string)


@pytest.fixture(scope="session")
def vault(account: StorageAccount) -> Vault:
    return Vault(account).ensure()


@pytest.fixture
def stream() -> str:
    """A fresh stream name per test, so tests share one Azurite without sharing data."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def vault_host(azurite: Azurite) -> Iterator[HostProcess]:
    """The local Functions host running function_app.py on the session's Azurite.

    ``.url`` is the API base (``http://127.0.0.1:PORT/api``), ``.key`` the function key,
    ``.connection_string`` the Azurite it uses; ``.stop()`` / ``.start()`` restart it.
    """
    host = HostProcess(azurite.connection_string, key="test-key").start()
    yield host
    host.stop()


FAST_RETRY_HOST_JSON = {
    "version": "2.0",
    "extensions": {
        "http": {"routePrefix": "api"},
        "queues": {
            "batchSize": 1,
            "newBatchThreshold": 0,
            "maxDequeueCount": 3,
            "visibilityTimeout": "00:00:00",
            "maxPollingInterval": "00:00:01",
            "messageEncoding": "none",
        },
    },
}
"""host.json for hosts that tests kill or starve: quick retries, quick poison."""


def isolated_host(
    azurite: Azurite,
    tmp_path: Path,
    *args: str,
    prefix: str | None = None,
    settings: dict[str, str] | None = None,
) -> HostProcess:
    """A host of its own, on queues of its own, so killing it disturbs no other test."""
    host_json = tmp_path / "host.json"
    host_json.write_text(json.dumps(FAST_RETRY_HOST_JSON))
    return HostProcess(
        azurite.connection_string,
        settings={"VAULT_QUEUE_PREFIX": prefix or f"q{uuid.uuid4().hex[:8]}", **(settings or {})},
        args=("--host-json", str(host_json), "--inflight-visibility", "3", *args),
    )
