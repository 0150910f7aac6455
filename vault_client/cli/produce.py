"""``vault produce STREAM [FILE|-]``: send NDJSON messages or plain lines, batched."""

from __future__ import annotations

import os
import time
from typing import BinaryIO

import click

from vault_client.cli.args import stream_name
from vault_client.cli.inputs import Format, read_messages
from vault_client.cli.progress import human_bytes, progress_bar, rate
from vault_client.cli.settings import connection_options, settings
from vault_client.producer import Producer
from vault_core import limits
from vault_core.limits import MAX_WAIT_SECONDS

PROGRESS_EVERY = 1000


def _size(file: BinaryIO) -> int | None:
    try:
        st = os.fstat(file.fileno())
    except (OSError, ValueError, AttributeError):  # stdin in tests has no file descriptor
        return None
    return st.st_size if st.st_size > 0 and os.path.isfile(getattr(file, "name", "")) else None


@click.command()
@click.argument("stream", callback=stream_name)
@click.argument("file", type=click.File("rb"), default="-", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "ndjson", "lines"]),
    default="auto",
    show_default=True,
    help='NDJSON objects {"key", "value", "encoding"?, "key_encoding"?}, or one message per line.',
)
@click.option("--message-key", metavar="TEXT", help="Key of every message read as a plain line.")
@click.option(
    "--batch-messages",
    type=click.IntRange(1, limits.MAX_BATCH_MESSAGES),
    default=1000,
    show_default=True,
    help="Most messages per batch.",
)
@click.option(
    "--batch-bytes",
    type=click.IntRange(1024, limits.MAX_BATCH_BYTES),
    default=1024 * 1024,
    show_default=True,
    help="Most bytes per batch request.",
)
@click.option(
    "--linger",
    type=click.FloatRange(0, 60),
    default=0.05,
    show_default=True,
    metavar="SECONDS",
    help="How long a batch waits for more messages.",
)
@click.option(
    "--in-flight",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Batches sent concurrently (more than 1 may reorder batches).",
)
@click.option(
    "--wait",
    type=click.FloatRange(0, MAX_WAIT_SECONDS),
    default=0,
    metavar="SECONDS",
    help="Wait up to this long for each batch to be committed (slower; default: staged is enough).",
)
@connection_options()
def produce(
    stream: str,
    file: BinaryIO,
    fmt: Format,
    message_key: str | None,
    batch_messages: int,
    batch_bytes: int,
    linger: float,
    in_flight: int,
    wait: float,
) -> None:
    """Send messages from FILE (default: stdin) to STREAM.

    Each line is a message: an NDJSON object with "value" (and optional "key", "encoding":
    "base64", "key_encoding": "base64"), or plain text (with --message-key as its key).
    Blank lines are skipped. Ends with a summary: messages, bytes and rate.
    """
    s = settings()
    producer = Producer(
        api=s.api(),
        batch_max_messages=batch_messages,
        batch_max_bytes=batch_bytes,
        linger=linger,
        max_in_flight=in_flight,
        ordered=in_flight == 1,
        wait=wait,
    )
    started = time.monotonic()
    count = read = 0
    try:
        with progress_bar(s.quiet) as bar:
            task = bar.add_task(f"producing to {stream}", total=_size(file), messages=0)

            def show() -> None:
                # The bar counts input bytes the vault has accepted (estimated from the accepted
                # share of the messages read), so it reaches 100% when the last batch is in.
                accepted = producer.stats().messages
                bar.update(task, completed=read * accepted // max(count, 1), messages=accepted)

            for message in read_messages(file, fmt, message_key):
                producer.send(stream, message.value, message.key)
                count += 1
                read += message.size
                if count % PROGRESS_EVERY == 0:
                    show()
                    _stop_on_failure(producer)
            while True:  # the buffer may hold many batches yet: keep the bar moving while they go
                try:
                    producer.flush(timeout=0.25)
                    break
                except TimeoutError:
                    show()
                    _stop_on_failure(producer)
            show()
    finally:
        producer.close()
    _stop_on_failure(producer)
    seconds = time.monotonic() - started
    if not s.quiet:
        click.echo(
            f"produced {count:,} messages ({human_bytes(read)}) to {stream!r} in {seconds:.2f} s: "
            f"{rate(count, seconds):,.0f} msg/s, {human_bytes(rate(read, seconds))}/s"
        )


def _stop_on_failure(producer: Producer) -> None:
    # A failed batch is final (retries are spent): stop instead of reading the rest of the input.
    error = producer.last_error
    if error is not None:
        failed = producer.stats().failed
        raise click.ClickException(f"{failed:,} message(s) were not accepted: {error}")
