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

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from vault_app.auth.policy import Policy, parse_grants, parse_patterns
from vault_app.auth.tokens import check_url
from vault_core import codecs, limits
from vault_core.positive import positive
from vault_core.recordformat import MAX_VALUE_BYTES
from vault_core.retry import REQUEST_BUDGET_SECONDS
from vault_core.writer import WriterSettings

T = TypeVar("T")

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
RECORD_FORMAT = "VAULT_RECORD_FORMAT"
"""``2`` (default): commits are written as compressed version 2 units (docs/FORMAT.md §11);
``1``: one version 1 record per message, readable by the previous release."""
RECORD_CODEC = "VAULT_RECORD_CODEC"
"""Codec of version 2 units: ``zstd`` (default), ``lz4`` or ``none`` (BENCHMARKS.md has their costs)."""
MAX_WAITING = "VAULT_MAX_WAITING"
DEFAULT_MAX_WAITING = 400
"""Requests that may wait (``?wait=``) at once per worker process; past it: 429."""
REQUEST_BUDGET = "VAULT_REQUEST_BUDGET_SECONDS"
"""Seconds every storage call of one HTTP request may take together (default
``vault_core.retry.REQUEST_BUDGET_SECONDS``): past it, 503. Tests set less, so that a fault
that must outlast it can be shorter."""
UNAVAILABLE_RETRY = "VAULT_UNAVAILABLE_RETRY_SECONDS"
DEFAULT_UNAVAILABLE_RETRY_SECONDS = 5
"""Seconds a batch the writer handed back because storage could not be reached stays hidden."""

# Access control (docs/SECURITY.md).
AUTH_TENANT_ID = "VAULT_AUTH_TENANT_ID"
"""Entra tenant id: trusts its v2 and v1 token issuers. Empty: see AUTH_ISSUER."""
AUTH_ISSUER = "VAULT_AUTH_ISSUER"
"""Token issuers, comma-separated, instead of a tenant (other clouds, the development issuer);
the first one's ``/.well-known/openid-configuration`` publishes the signing keys."""
AUTH_AUDIENCE = "VAULT_AUTH_AUDIENCE"
"""Accepted ``aud`` values, comma-separated: the app registration's client id and App ID URI."""
FUNCTION_KEYS = "VAULT_FUNCTION_KEYS"
"""Named function keys the app accepts, as JSON ``{"name": "secret"}`` (a secret: Key Vault)."""
ACCESS_POLICY = "VAULT_ACCESS_POLICY"
"""Grants, as JSON ``{"grants": [{"role"|"group"|"principal"|"app"|"key": ..., "allow": [...],
"streams": [...]}]}``."""
ANONYMOUS_READ = "VAULT_ANONYMOUS_READ"
"""Stream patterns anyone may read without a credential, comma-separated. Empty: none."""
EASY_AUTH = "VAULT_EASY_AUTH"
"""``true``: trust the X-MS-CLIENT-PRINCIPAL header of App Service Authentication."""

AUTH_SETTINGS: tuple[str, ...] = (
    AUTH_TENANT_ID,
    AUTH_ISSUER,
    AUTH_AUDIENCE,
    FUNCTION_KEYS,
    ACCESS_POLICY,
    ANONYMOUS_READ,
    EASY_AUTH,
)

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
    RECORD_FORMAT,
    RECORD_CODEC,
    *AUTH_SETTINGS,
)

# Identity-based connection suffixes, per service the connection is used for.
IDENTITY_SUFFIXES = ("__credential", "__clientId")
VAULT_SERVICE_SUFFIXES = ("__blobServiceUri", "__tableServiceUri")
"""The vault account's blobs and tables; the app uses no queue there (staging has its own accounts)."""
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
    max_message_bytes: int = limits.MAX_MESSAGE_BYTES
    max_batch_messages: int = limits.MAX_BATCH_MESSAGES
    max_batch_bytes: int = limits.MAX_BATCH_BYTES


@dataclass(frozen=True)
class AuthSettings:
    """Who may call the app (docs/SECURITY.md); build with :func:`load_auth`."""

    issuers: tuple[str, ...] = ()
    audiences: tuple[str, ...] = ()
    keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    policy: Policy = field(default_factory=Policy)
    easy_auth: bool = False

    @property
    def tokens(self) -> bool:
        """Bearer tokens are accepted (an issuer and an audience are configured)."""
        return bool(self.issuers and self.audiences)


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
    max_waiting: int = DEFAULT_MAX_WAITING
    request_budget_seconds: float = REQUEST_BUDGET_SECONDS
    unavailable_retry_seconds: int = DEFAULT_UNAVAILABLE_RETRY_SECONDS
    auth: AuthSettings = AuthSettings()
    record_format: int = 2
    record_codec: int = codecs.CODEC_ZSTD

    @property
    def writer_settings(self) -> WriterSettings:
        """How this app's writers encode new commits."""
        return WriterSettings(record_format=self.record_format, codec=self.record_codec)

    @property
    def queue_names(self) -> list[str]:
        return [f"{self.queue_prefix}-{i}" for i in range(self.queues_per_account)]


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return positive(env, name, default, label=f"setting {name}")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    return positive(env, name, default, float, label=f"setting {name} (seconds)")


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
        max_waiting=_int(env, MAX_WAITING, DEFAULT_MAX_WAITING),
        request_budget_seconds=_seconds(env, REQUEST_BUDGET, REQUEST_BUDGET_SECONDS),
        unavailable_retry_seconds=_int(env, UNAVAILABLE_RETRY, DEFAULT_UNAVAILABLE_RETRY_SECONDS),
        auth=load_auth(env),
        record_format=_record_format(env),
        record_codec=_parsed(RECORD_CODEC, codecs.codec_id, env.get(RECORD_CODEC) or codecs.DEFAULT_CODEC),
    )


def _record_format(env: Mapping[str, str]) -> int:
    raw = (env.get(RECORD_FORMAT) or "2").strip()
    if raw not in ("1", "2"):
        raise ValueError(f"setting {RECORD_FORMAT} must be 1 or 2, got {raw!r}")
    return int(raw)


ENTRA_AUTHORITY = "https://login.microsoftonline.com"
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_KEY_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
MIN_KEY_CHARS = 16
"""A function key shorter than this could be guessed; make them with secrets.token_urlsafe(32)."""


def entra_issuers(tenant_id: str) -> tuple[str, ...]:
    """The issuers of a tenant's access tokens: v2.0 (first: its metadata has the keys) and v1.0
    (what a managed identity gets unless the app registration asks for v2 tokens)."""
    return (f"{ENTRA_AUTHORITY}/{tenant_id}/v2.0", f"https://sts.windows.net/{tenant_id}/")


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.strip() for v in (env.get(name) or "").split(",") if v.strip()))


def _parsed(name: str, parse: Callable[[str], T], raw: str) -> T:
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"setting {name}: {exc}") from None


def _keys(raw: str) -> dict[str, str]:
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ValueError('expected JSON {"name": "secret", ...}') from None
    if not isinstance(doc, dict):
        raise ValueError('expected JSON {"name": "secret", ...}')
    for name, secret in doc.items():
        if not _KEY_NAME.fullmatch(name):
            raise ValueError(f"key name {name!r}: use 1-64 of A-Z a-z 0-9 . _ -")
        if not isinstance(secret, str) or len(secret) < MIN_KEY_CHARS:
            raise ValueError(f"key {name!r} must be a string of at least {MIN_KEY_CHARS} characters")
    if len(set(doc.values())) != len(doc):
        raise ValueError("two keys have the same secret")
    return dict(doc)


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise ValueError(f"setting {name} must be true or false, got {raw!r}")


def load_auth(env: Mapping[str, str]) -> AuthSettings:
    """Fail at start on anything half-configured, rather than fail open (or shut) at a request."""
    tenant = (env.get(AUTH_TENANT_ID) or "").strip()
    if tenant and not _GUID.fullmatch(tenant):
        raise ValueError(f"setting {AUTH_TENANT_ID} must be a tenant id (a GUID), got {tenant!r}")
    issuers = _list(env, AUTH_ISSUER) or (entra_issuers(tenant) if tenant else ())
    audiences = _list(env, AUTH_AUDIENCE)
    if issuers and not audiences:
        raise ValueError(f"setting {AUTH_AUDIENCE} is needed with an issuer: tokens for any app would pass")
    if audiences and not issuers:
        raise ValueError(f"setting {AUTH_AUDIENCE} needs {AUTH_TENANT_ID} or {AUTH_ISSUER}")
    for issuer in issuers:
        _parsed(AUTH_ISSUER, check_url, issuer)
    grants = _parsed(ACCESS_POLICY, parse_grants, env.get(ACCESS_POLICY) or "")
    anonymous = _parsed(ANONYMOUS_READ, parse_patterns, env.get(ANONYMOUS_READ) or "")
    return AuthSettings(
        issuers=issuers,
        audiences=audiences,
        keys=_parsed(FUNCTION_KEYS, _keys, env.get(FUNCTION_KEYS) or ""),
        policy=Policy(grants, anonymous),
        easy_auth=_bool(env, EASY_AUTH),
    )
