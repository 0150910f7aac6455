"""Where the CLI's endpoint, credential and checkpoint storage come from: flags, else environment
variables.

The credential is one of ``--key`` (a function key), ``--token`` (a bearer token, e.g. from
``az account get-access-token``) or ``--use-azure-credential`` (``DefaultAzureCredential``: the
Azure CLI login, a managed identity, environment variables...) with ``--scope``; none is anonymous.

The connection options are accepted both before the command (``vault --url U consume s``)
and after it (``vault consume s --url U``); a flag given after the command wins. Only the
group-level options read environment variables, so a flag always beats the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from vault_client.api import ApiClient
from vault_client.retry import RetryPolicy
from vault_core.azure import StorageAccount
from vault_core.checkpoints import DEFAULT_TABLE, CheckpointStore
from vault_core.errors import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])

ENV_URL = "VAULT_URL"
ENV_KEY = "VAULT_KEY"
ENV_TOKEN = "VAULT_TOKEN"
ENV_AZURE_CREDENTIAL = "VAULT_USE_AZURE_CREDENTIAL"
ENV_SCOPE = "VAULT_SCOPE"
ENV_STORAGE = "VAULT_STORAGE_CONNECTION"
ENV_TABLE = "VAULT_CHECKPOINT_TABLE"


@dataclass
class CliSettings:
    url: str | None = None
    key: str | None = None
    token: str | None = None
    use_azure_credential: bool = False
    scope: str | None = None
    storage: str | None = None
    table: str = DEFAULT_TABLE
    timeout: float = 30.0
    retries: int = 3
    quiet: bool = False
    _api: ApiClient | None = field(default=None, repr=False)
    _store: CheckpointStore | None = field(default=None, repr=False)

    def api(self) -> ApiClient:
        if self._api is None:
            if not self.url:
                raise click.UsageError(f"no vault URL: pass --url or set {ENV_URL}")
            policy = RetryPolicy(attempts=self.retries + 1, base=0.2, deadline=max(self.timeout * 2, 10.0))
            given = [n for n, v in (("--key", self.key), ("--token", self.token)) if v]
            if self.use_azure_credential:
                given.append("--use-azure-credential")
            if len(given) > 1:
                raise click.UsageError(f"give one credential, not {' and '.join(given)}")
            credential = None
            if self.use_azure_credential:
                if not self.scope:
                    raise click.UsageError(
                        f"--use-azure-credential needs the vault's scope: pass --scope or set {ENV_SCOPE} "
                        "(api://<client-id>/.default)"
                    )
                from azure.identity import DefaultAzureCredential  # only needed for this

                credential = DefaultAzureCredential()
            try:
                self._api = ApiClient(
                    self.url,
                    self.key,
                    token=self.token,
                    credential=credential,
                    scope=self.scope if credential else None,
                    timeout=self.timeout,
                    retry=policy,
                )
            except InvalidInput as exc:  # a malformed --url is a usage error, like any bad argument
                raise click.UsageError(str(exc)) from None
        return self._api

    def checkpoints(self) -> CheckpointStore:
        """Consumer-group checkpoints: a connection string, or a Table service URL (Entra ID sign-in)."""
        if self._store is None:
            if not self.storage:
                raise click.UsageError(
                    f"consumer groups need the checkpoint storage: pass --storage or set {ENV_STORAGE}"
                )
            if self.storage.startswith(("http://", "https://")):
                # Imported lazily: azure-identity is only needed for keyless access.
                from azure.identity import DefaultAzureCredential

                account = StorageAccount(table_url=self.storage, credential=DefaultAzureCredential())
            else:
                account = StorageAccount(connection_string=self.storage)
            self._store = CheckpointStore.from_account(account, self.table)
        return self._store

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None


def _setter(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            setattr(ctx.ensure_object(CliSettings), name, value)
        return value

    return store


def connection_options(*, top: bool = False) -> Callable[[F], F]:
    """--url/--key/--storage/... as options of the group (``top``, with env vars) or of a command."""

    def env(name: str) -> str | None:
        return name if top else None

    options = [
        click.option(
            "--url",
            metavar="URL",
            envvar=env(ENV_URL),
            show_envvar=top,
            expose_value=False,
            callback=_setter("url"),
            help="The vault API, e.g. https://APP.azurewebsites.net/api.",
        ),
        click.option(
            "--key",
            metavar="KEY",
            envvar=env(ENV_KEY),
            show_envvar=top,
            expose_value=False,
            callback=_setter("key"),
            help="Function key (x-functions-key); what it may do is the vault's access policy.",
        ),
        click.option(
            "--token",
            metavar="TOKEN",
            envvar=env(ENV_TOKEN),
            show_envvar=top,
            expose_value=False,
            callback=_setter("token"),
            help="Bearer token for the vault's audience (az account get-access-token --scope SCOPE).",
        ),
        click.option(
            "--use-azure-credential",
            is_flag=True,
            default=None,
            envvar=env(ENV_AZURE_CREDENTIAL),
            show_envvar=top,
            expose_value=False,
            callback=_setter("use_azure_credential"),
            help="Sign in with DefaultAzureCredential (az login, managed identity, ...) for --scope.",
        ),
        click.option(
            "--scope",
            metavar="SCOPE",
            envvar=env(ENV_SCOPE),
            show_envvar=top,
            expose_value=False,
            callback=_setter("scope"),
            help="The vault's scope for --use-azure-credential: api://<client-id>/.default.",
        ),
        click.option(
            "--storage",
            metavar="CONN",
            envvar=env(ENV_STORAGE),
            show_envvar=top,
            expose_value=False,
            callback=_setter("storage"),
            help="Consumer-group checkpoints: a storage connection string or Table service URL.",
        ),
        click.option(
            "--checkpoint-table",
            metavar="NAME",
            envvar=env(ENV_TABLE),
            show_envvar=top,
            expose_value=False,
            callback=_setter("table"),
            help=f"Checkpoint table (default {DEFAULT_TABLE}).",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0.1),
            metavar="SECONDS",
            expose_value=False,
            callback=_setter("timeout"),
            help="Seconds to wait for an answer (default 30).",
        ),
        click.option(
            "--retries",
            type=click.IntRange(min=0),
            metavar="N",
            expose_value=False,
            callback=_setter("retries"),
            help="Retries of throttled or failed requests (default 3).",
        ),
        click.option(
            "-q",
            "--quiet",
            is_flag=True,
            default=None,
            expose_value=False,
            callback=_setter("quiet"),
            help="No progress bars or summaries.",
        ),
    ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def settings() -> CliSettings:
    return click.get_current_context().ensure_object(CliSettings)
