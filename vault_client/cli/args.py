"""Argument checks shared by commands: bad values are usage errors (exit 2), caught before any request."""

from __future__ import annotations

import click

from vault_client.wire import to_millis
from vault_core.errors import InvalidInput
from vault_core.names import validate_batch_id, validate_stream_name


def stream_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_stream_name(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def optional_stream_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else stream_name(ctx, param, value)


def optional_batch_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        return None if value is None else validate_batch_id(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def start_offset(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """``--from``: an offset, ``beginning`` or ``end``."""
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("beginning", "end"):
        return text
    if text.isdigit():
        return int(text)
    raise click.BadParameter(
        f"{value!r} is not an offset (a whole number >= 0), 'beginning' or 'end'", ctx, param
    )


def time_value(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--at``: milliseconds since the epoch, or ISO 8601."""
    if value is None:
        return None
    try:
        return to_millis(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
