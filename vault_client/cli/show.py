"""How the listing commands (``vault streams``, ``info``, ``groups``, ``poison``) show what they
found: a table for people, or the API's JSON for programs."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console


def console() -> Console:
    """Wide when not a terminal, so piped tables keep one row a line instead of wrapping at 80."""
    probe = Console()
    return Console(width=None if probe.is_terminal else 200, soft_wrap=False)


def print_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2))


def number(n: int | None) -> str:
    """A count with thousands separators; empty when unknown."""
    return "" if n is None else f"{n:,}"
