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
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from vault_client.api import DEFAULT_TIMEOUT, ApiClient
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
    checkpoint_table: str = DEFAULT_TABLE
    timeout: float = DEFAULT_TIMEOUT
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
            self._store = CheckpointStore.from_account(account, self.checkpoint_table)
        return self._store

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # Only what was given sets a field: a command's own default must not undo a value given
    # before the command (or in the environment).
    if ctx.get_parameter_source(str(param.name)) is not ParameterSource.DEFAULT:
        setattr(ctx.ensure_object(CliSettings), str(param.name), value)
    return value


_DEFAULTS = {f.name: f.default for f in fields(CliSettings)}


def connection_options(*, top: bool = False) -> Callable[[F], F]:
    """--url/--key/--storage/... as options of the group (``top``, with env vars) or of a command."""

    def setting(*names: str, env: str | None = None, **kwargs: Any) -> Callable[[F], F]:
        """An option that sets the field of the settings named after it and shows that field's
        default; read from ``env`` too, on the group only."""
        name = names[-1].removeprefix("--").replace("-", "_")
        return click.option(
            *names,
            name,
            default=_DEFAULTS[name],
            show_default=True,
            envvar=env if top else None,
            show_envvar=top and env is not None,
            expose_value=False,
            callback=_store,
            **kwargs,
        )

    options = [
        setting(
            "--url", env=ENV_URL, metavar="URL", help="The vault API, e.g. https://APP.azurewebsites.net/api."
        ),
        setting(
            "--key",
            env=ENV_KEY,
            metavar="KEY",
            help="Function key (x-functions-key); what it may do is the vault's access policy.",
        ),
        setting(
            "--token",
            env=ENV_TOKEN,
            metavar="TOKEN",
            help="Bearer token for the vault's audience (az account get-access-token --scope SCOPE).",
        ),
        setting(
            "--use-azure-credential",
            env=ENV_AZURE_CREDENTIAL,
            is_flag=True,
            help="Sign in with DefaultAzureCredential (az login, managed identity, ...) for --scope.",
        ),
        setting(
            "--scope",
            env=ENV_SCOPE,
            metavar="SCOPE",
            help="The vault's scope for --use-azure-credential: api://<client-id>/.default.",
        ),
        setting(
            "--storage",
            env=ENV_STORAGE,
            metavar="CONN",
            help="Consumer-group checkpoints: a storage connection string or Table service URL.",
        ),
        setting("--checkpoint-table", env=ENV_TABLE, metavar="NAME", help="Checkpoint table."),
        setting(
            "--timeout",
            type=click.FloatRange(min=0.1),
            metavar="SECONDS",
            help="Seconds to wait for an answer.",
        ),
        setting(
            "--retries",
            type=click.IntRange(min=0),
            metavar="N",
            help="Retries of throttled or failed requests.",
        ),
        setting("-q", "--quiet", is_flag=True, help="No progress bars or summaries."),
    ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def settings() -> CliSettings:
    return click.get_current_context().ensure_object(CliSettings)
