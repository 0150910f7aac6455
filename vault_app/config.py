"""Every setting the app reads, in one place.

The names here are the single source of truth: ``local.settings.sample.json``, the README
and ``infra/app/*.bicep`` use exactly these names, and ``tests/test_infra.py``
checks that Bicep sets every app setting and nothing the app does not read.

Storage connections follow the Azure Functions convention for a connection named ``NAME``:
either ``NAME`` holds a connection string (Azurite, local), or identity-based settings
``NAME__blobServiceUri`` / ``NAME__queueServiceUri`` / ``NAME__tableServiceUri`` with
``NAME__credential=managedidentity`` and ``NAME__clientId`` (user-assigned identity).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from vault_core.format import MAX_VALUE_BYTES

# Connection names (the Functions "connection" property of bindings).
VAULT_CONNECTION = "VaultStorage"
"""The vault account: stream page blobs, catalog/index tables, claim-check blobs."""
STAGING_CONNECTION_PREFIX = "VaultStaging"
"""Staging accounts are ``VaultStaging0``, ``VaultStaging1``, ... (scale units)."""

# Plain settings.
STAGING_ACCOUNTS = "VAULT_STAGING_ACCOUNTS"
STAGING_QUEUES_PER_ACCOUNT = "VAULT_STAGING_QUEUES"
QUEUE_PREFIX = "VAULT_QUEUE_PREFIX"
STREAMS_CONTAINER = "VAULT_STREAMS_CONTAINER"
CLAIMCHECK_CONTAINER = "VAULT_CLAIMCHECK_CONTAINER"
TABLE_PREFIX = "VAULT_TABLE_PREFIX"
MAX_MESSAGE_BYTES = "VAULT_MAX_MESSAGE_BYTES"
MAX_BATCH_MESSAGES = "VAULT_MAX_BATCH_MESSAGES"
MAX_BATCH_BYTES = "VAULT_MAX_BATCH_BYTES"
SAS_MINUTES = "VAULT_SAS_MINUTES"

PLAIN_SETTINGS: tuple[str, ...] = (
    STAGING_ACCOUNTS,
    STAGING_QUEUES_PER_ACCOUNT,
    QUEUE_PREFIX,
    STREAMS_CONTAINER,
    CLAIMCHECK_CONTAINER,
    TABLE_PREFIX,
    MAX_MESSAGE_BYTES,
    MAX_BATCH_MESSAGES,
    MAX_BATCH_BYTES,
    SAS_MINUTES,
)

# Identity-based connection suffixes, per service the connection is used for.
IDENTITY_SUFFIXES = ("__credential", "__clientId")
VAULT_SERVICE_SUFFIXES = ("__blobServiceUri", "__queueServiceUri", "__tableServiceUri")
STAGING_SERVICE_SUFFIXES = ("__queueServiceUri",)


def staging_connection(account_index: int) -> str:
    return f"{STAGING_CONNECTION_PREFIX}{account_index}"


def identity_setting_names(staging_accounts: int) -> list[str]:
    """The app settings an identity-based deployment (Bicep) must set, besides PLAIN_SETTINGS."""
    names = [VAULT_CONNECTION + s for s in VAULT_SERVICE_SUFFIXES + IDENTITY_SUFFIXES]
    for i in range(staging_accounts):
        names += [staging_connection(i) + s for s in STAGING_SERVICE_SUFFIXES + IDENTITY_SUFFIXES]
    return names


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int = 1024 * 1024
    max_batch_messages: int = 10_000
    max_batch_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class VaultSettings:
    """Parsed settings; build with :func:`load_settings`."""

    env: Mapping[str, str] = field(repr=False)
    staging_accounts: int = 1
    queues_per_account: int = 4
    queue_prefix: str = "mv-staging"
    streams_container: str = "streams"
    claimcheck_container: str = "mv-claimcheck"
    table_prefix: str = "mv"
    limits: Limits = Limits()
    sas_minutes: int = 15

    @property
    def queue_names(self) -> list[str]:
        return [f"{self.queue_prefix}-{i}" for i in range(self.queues_per_account)]


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"setting {name} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise ValueError(f"setting {name} must be positive, got {value}")
    return value


def _capped(env: Mapping[str, str], name: str, default: int, cap: int) -> int:
    value = _int(env, name, default)
    if value > cap:
        raise ValueError(f"setting {name} is {value}; the record format allows at most {cap}")
    return value


def load_settings(env: Mapping[str, str] | None = None) -> VaultSettings:
    """Read every setting from ``env`` (default: the process environment)."""
    env = dict(os.environ if env is None else env)
    defaults = Limits()
    return VaultSettings(
        env=env,
        staging_accounts=_int(env, STAGING_ACCOUNTS, 1),
        queues_per_account=_int(env, STAGING_QUEUES_PER_ACCOUNT, 4),
        queue_prefix=env.get(QUEUE_PREFIX) or "mv-staging",
        streams_container=env.get(STREAMS_CONTAINER) or "streams",
        claimcheck_container=env.get(CLAIMCHECK_CONTAINER) or "mv-claimcheck",
        table_prefix=env.get(TABLE_PREFIX) or "mv",
        limits=Limits(
            max_message_bytes=_capped(env, MAX_MESSAGE_BYTES, defaults.max_message_bytes, MAX_VALUE_BYTES),
            max_batch_messages=_int(env, MAX_BATCH_MESSAGES, defaults.max_batch_messages),
            max_batch_bytes=_int(env, MAX_BATCH_BYTES, defaults.max_batch_bytes),
        ),
        sas_minutes=_int(env, SAS_MINUTES, 15),
    )
