"""Shared fixtures: one real Azurite for the session, started and stopped by the tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from vault_core.azure import StorageAccount
from vault_core.vault import Vault
from vault_local.azurite import Azurite


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
