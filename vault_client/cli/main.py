"""The ``vault`` command: the group, its commands, and the one place errors become exit codes.

Every failure ends as one line on stderr (``vault: error: ...``) and a non-zero exit:
2 for bad arguments, 1 for everything else, 130 when interrupted. ``VAULT_DEBUG=1`` shows
the stack trace of an unexpected error instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from vault_client.cli.settings import CliSettings, connection_options
from vault_core.errors import VaultError

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    first = " ".join(message.split())  # one line, whatever the message looked like
    click.echo(f"vault: error: {first}", err=True)
    sys.exit(code)


class VaultGroup(click.Group):
    """A click group whose errors are one line each, never a usage dump or a stack trace."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,  # type: ignore[override]
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            fail(exc.format_message() + hint, EXIT_USAGE)
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            fail("interrupted", EXIT_INTERRUPTED)
        except VaultError as exc:
            fail(str(exc) or exc.__class__.__name__)
        except OSError as exc:  # files that cannot be opened or written (click handles a closed stdout pipe)
            fail(f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}")
        except Exception as exc:
            if os.environ.get("VAULT_DEBUG"):
                raise
            fail(f"unexpected {exc.__class__.__name__}: {exc} (set VAULT_DEBUG=1 for details)")
        sys.exit(code if isinstance(code, int) else 0)


@click.group(
    cls=VaultGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@connection_options(top=True)
@click.version_option(package_name="message-vault", prog_name="vault")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Produce to and consume from Message Vault streams.

    The endpoint comes from --url or VAULT_URL; the credential from --key/VAULT_KEY,
    --token/VAULT_TOKEN, or --use-azure-credential with --scope (VAULT_SCOPE); consumer groups
    keep their checkpoints in the Azure Tables of --storage or VAULT_STORAGE_CONNECTION.
    """
    s = ctx.ensure_object(CliSettings)
    ctx.call_on_close(s.close)


def _register() -> None:
    # Imported here so each command lives in its own module and this one stays the entry point.
    from vault_client.cli import capacity, catalog, consume, export, poison, produce, verify, whoami

    for command in (
        produce.produce,
        consume.consume,
        catalog.streams,
        catalog.info,
        catalog.groups,
        export.export,
        verify.verify,
        poison.poison,
        whoami.whoami,
        capacity.capacity,
    ):
        cli.add_command(command)


_register()


def main() -> None:
    """Console script entry point (``vault``)."""
    cli.main(prog_name="vault")
