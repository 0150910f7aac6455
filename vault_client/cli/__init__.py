"""The ``vault`` command line (click); see docs/CLIENT.md for the reference."""

from vault_client.cli.main import cli, main

__all__ = ["cli", "main"]
