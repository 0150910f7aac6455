"""Options that more than one command takes, and options that set a library parameter: each
declared once, so commands agree with each other and with the library they drive."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from vault_core.limits import MAX_WAIT_SECONDS

F = TypeVar("F", bound=Callable[..., Any])


def library_option(
    option: str, function: Callable[..., Any], parameter: str, **kwargs: Any
) -> Callable[[F], F]:
    """An option for ``parameter`` of ``function`` (the command passes it on), whose default is the
    library's own default, read from ``function``'s signature so the two cannot drift apart."""
    default = inspect.signature(function).parameters[parameter].default
    return click.option(option, parameter, default=default, show_default=True, **kwargs)


def wait_option(function: Callable[..., Any], help: str) -> Callable[[F], F]:
    """``--wait SECONDS``: how long the API may hold each request (its ``wait``, which the API
    bounds by MAX_WAIT_SECONDS), for ``function``'s ``wait`` parameter."""
    return library_option(
        "--wait", function, "wait", type=click.FloatRange(0, MAX_WAIT_SECONDS), metavar="SECONDS", help=help
    )


def format_option(choices: Sequence[str], help: str, default: str | None = None) -> Callable[[F], F]:
    """``--format`` (the command's ``fmt``): the form of what the command reads or writes."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=default is not None,
        help=help,
    )
