"""``vault consume STREAM``: print messages from an offset, a time, a group's checkpoint; or follow."""

from __future__ import annotations

import sys
import time
from typing import get_args

import click

from vault_client.cli.args import start_offset, stream_name, time_value
from vault_client.cli.options import format_option, library_option, wait_option
from vault_client.cli.output import FORMATTERS, OutputFormat
from vault_client.cli.settings import connection_options, settings
from vault_client.consumer import Consumer


@click.command()
@click.argument("stream", callback=stream_name)
@click.option(
    "--from",
    "start",
    metavar="OFFSET|beginning|end",
    callback=start_offset,
    help="Where to start (default: beginning; with --group: the group's checkpoint).",
)
@click.option(
    "--at",
    metavar="TIME",
    callback=time_value,
    help="Start at the first message at or after TIME (epoch ms or ISO 8601: 2026-11-22T06:00Z).",
)
@click.option(
    "--group",
    metavar="NAME",
    help="Consumer group: resume from its checkpoint and commit the position (needs --storage).",
)
@click.option("-f", "--follow", is_flag=True, help="Keep waiting for new messages (Ctrl-C to stop).")
@click.option("-n", "--limit", type=click.IntRange(min=1), metavar="N", help="Stop after N messages.")
@format_option(
    get_args(OutputFormat),
    "ndjson: API message objects; text: each value as a line; raw: the values' bytes.",
    default="ndjson",
)
@click.option(
    "--direct",
    is_flag=True,
    help="Read the blob directly with a SAS from the API (the server is off the read path).",
)
@wait_option(Consumer, "Long-poll time of each request when following.")
@click.option("--no-commit", is_flag=True, help="With --group: start from the checkpoint but do not move it.")
@library_option(
    "--commit-interval",
    Consumer,
    "commit_interval",
    type=click.FloatRange(0),
    metavar="SECONDS",
    help="With --group: how often the checkpoint is committed while reading.",
)
@connection_options()
def consume(
    stream: str,
    start: int | str | None,
    at: int | None,
    group: str | None,
    follow: bool,
    limit: int | None,
    fmt: OutputFormat,
    direct: bool,
    wait: float,
    no_commit: bool,
    commit_interval: float,
) -> None:
    """Write the messages of STREAM to stdout.

    Without --follow it stops at the committed end. With --group the checkpoint is committed
    every --commit-interval seconds and at the end, after the output is flushed, so a message
    is committed only once it was written (at-least-once).
    """
    if start is not None and at is not None:
        raise click.UsageError("give --from or --at, not both")
    s = settings()
    api = s.api()
    store = s.checkpoints() if group else None
    consumer = Consumer.connect(
        None,
        stream,
        api=api,
        direct=direct,
        at=at,
        follow=follow,
        wait=wait,
        start="beginning" if start is None else start,
        group=group,
        checkpoints=store,
        auto_commit=False,
    )
    out = sys.stdout.buffer
    render = FORMATTERS[fmt]
    commit = group is not None and not no_commit
    count = 0
    last_commit = time.monotonic()
    try:
        for message in consumer:
            out.write(render(message))
            count += 1
            if follow:
                out.flush()  # a follower's reader is waiting for each message
            if commit and time.monotonic() - last_commit >= commit_interval:
                out.flush()
                consumer.commit()
                last_commit = time.monotonic()
            if limit is not None and count >= limit:
                break
        out.flush()
        if commit:
            consumer.commit()
    except KeyboardInterrupt:
        out.flush()
        if commit:
            consumer.commit()  # everything written so far was delivered
        raise
    finally:
        consumer.close(commit=False)
