"""Shared fixtures: one real Azurite for the session, started and stopped by the tests."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vault_core.azure import StorageAccount
from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.dev_issuer import DevIssuer
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
def dev_issuer() -> Iterator[DevIssuer]:
    """The development token issuer on loopback: the hosts trust it, tests mint its tokens."""
    with DevIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="session")
def vault_host(azurite: Azurite, dev_issuer: DevIssuer) -> Iterator[HostProcess]:
    """The local Functions host running function_app.py on the session's Azurite, with
    authentication on: it trusts ``dev_issuer``'s tokens, and ``.key`` is a function key with
    admin (so read and write) on every stream.

    ``.url`` is the API base (``http://127.0.0.1:PORT/api``), ``.key`` the function key,
    ``.connection_string`` the Azurite it uses; ``.stop()`` / ``.start()`` restart it.
    """
    host = HostProcess(azurite.connection_string, settings=dev_issuer.settings()).start()
    yield host
    host.stop()


@functools.cache
def app_http_functions() -> list[Any]:
    """The HTTP functions of function_app.py, read once: azure-functions refuses to list an
    app's functions a second time in one process (it sees each name as a duplicate)."""
    import function_app
    from vault_local.routes import discover

    return discover(function_app.app)[0]


def key_header(host: HostProcess) -> dict[str, str]:
    """The header that authenticates as ``host.key`` (admin on every stream)."""
    return {"x-functions-key": host.key}


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
    """A host of its own, on queues of its own, so killing it disturbs no other test.

    Authentication is on: ``.key`` has admin on every stream (see :class:`HostProcess`)."""
    host_json = tmp_path / "host.json"
    host_json.write_text(json.dumps(FAST_RETRY_HOST_JSON))
    return HostProcess(
        azurite.connection_string,
        settings={"VAULT_QUEUE_PREFIX": prefix or f"q{uuid.uuid4().hex[:8]}", **(settings or {})},
        args=("--host-json", str(host_json), "--inflight-visibility", "3", *args),
    )
