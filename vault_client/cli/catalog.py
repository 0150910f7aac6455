"""``vault streams``, ``vault info STREAM`` and ``vault groups``: what is in the vault, and who lags."""

from __future__ import annotations

import click
from rich.table import Table

from vault_client.cli.args import stream_name
from vault_client.cli.settings import connection_options, settings
from vault_client.cli.show import console, number, print_json
from vault_client.groups import group_lag
from vault_client.wire import iso


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
@connection_options()
def streams(as_json: bool) -> None:
    """List the streams.

    Per stream: messages, committed bytes, first and last message time, last update.
    """
    rows = settings().api().streams()
    if as_json:
        print_json(rows)
        return
    table = Table("stream", "messages", "bytes", "first message", "last message", "updated", box=None)
    for r in sorted(rows, key=lambda r: r["stream"]):
        table.add_row(
            r["stream"],
            number(r.get("count")),
            number(r.get("committed")),
            iso(r.get("first_timestamp")),
            iso(r.get("last_timestamp")),
            iso(r.get("updated")),
        )
    console().print(table)


@click.command()
@click.argument("stream", callback=stream_name)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@connection_options()
def info(stream: str, as_json: bool) -> None:
    """Show one stream.

    Committed length, message count and times, from the stream's commit record.
    """
    doc = settings().api().stream(stream)
    if as_json:
        print_json(doc)
        return
    for label, value in (
        ("stream", doc["stream"]),
        ("messages", number(doc.get("count"))),
        ("committed", f"{number(doc.get('committed'))} bytes"),
        ("first message", iso(doc.get("first_timestamp"))),
        ("last message", iso(doc.get("last_timestamp"))),
        ("created", iso(doc.get("created"))),
        ("updated", iso(doc.get("updated"))),
    ):
        click.echo(f"{label:<14} {value}")


@click.command()
@click.argument("group", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON rows.")
@connection_options()
def groups(group: str | None, as_json: bool) -> None:
    """List consumer groups with their lag.

    One row per group and stream (only GROUP's, if given): the checkpoint, the stream's
    committed length, and the lag: committed length minus checkpoint, in bytes.
    """
    s = settings()
    api = s.api()
    rows = group_lag(s.checkpoints(), api.committed, group)
    if as_json:
        print_json(
            [
                {
                    "group": r.group,
                    "stream": r.stream,
                    "checkpoint": r.offset,
                    "committed": r.committed,
                    "lag": r.lag,
                    "member": r.member,
                    "updated": r.updated,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no consumer group has committed a checkpoint" + (f" in group {group!r}" if group else ""))
        return
    table = Table("group", "stream", "checkpoint", "committed", "lag", "member", "updated", box=None)
    for r in rows:
        committed = number(r.committed) if r.committed is not None else "(stream gone)"
        table.add_row(
            r.group, r.stream, number(r.offset), committed, number(r.lag), r.member or "", iso(r.updated)
        )
    console().print(table)
