"""``vault produce STREAM [FILE|-]``: send NDJSON messages or plain lines, batched."""

from __future__ import annotations

import os
import time
from typing import BinaryIO, get_args

import click

from vault_client.cli.args import stream_name
from vault_client.cli.inputs import Format, read_messages
from vault_client.cli.options import format_option, library_option, wait_option
from vault_client.cli.progress import human_bytes, progress_bar, rate
from vault_client.cli.settings import connection_options, settings
from vault_client.producer import MAX_IN_FLIGHT, MAX_LINGER_SECONDS, MIN_BATCH_BYTES, Producer
from vault_core import limits

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
@format_option(
    get_args(Format),
    'NDJSON objects {"key", "value", "encoding"?, "key_encoding"?}, or one message per line.',
    default="auto",
)
@click.option("--message-key", metavar="TEXT", help="Key of every message read as a plain line.")
@library_option(
    "--batch-messages",
    Producer,
    "batch_max_messages",
    type=click.IntRange(1, limits.MAX_BATCH_MESSAGES),
    metavar="N",
    help="Most messages per batch.",
)
@library_option(
    "--batch-bytes",
    Producer,
    "batch_max_bytes",
    type=click.IntRange(MIN_BATCH_BYTES, limits.MAX_BATCH_BYTES),
    metavar="BYTES",
    help="Most bytes per batch request.",
)
@library_option(
    "--linger",
    Producer,
    "linger",
    type=click.FloatRange(0, MAX_LINGER_SECONDS),
    metavar="SECONDS",
    help="How long a batch waits for more messages.",
)
@library_option(
    "--in-flight",
    Producer,
    "max_in_flight",
    type=click.IntRange(1, MAX_IN_FLIGHT),
    metavar="N",
    help="Batches sent concurrently (more than 1 may reorder batches).",
)
@wait_option(Producer, "Wait up to this long for each batch to be committed (slower; 0: staged is enough).")
@connection_options()
def produce(
    stream: str,
    file: BinaryIO,
    fmt: Format,
    message_key: str | None,
    batch_max_messages: int,
    batch_max_bytes: int,
    linger: float,
    max_in_flight: int,
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
        batch_max_messages=batch_max_messages,
        batch_max_bytes=batch_max_bytes,
        linger=linger,
        max_in_flight=max_in_flight,
        ordered=max_in_flight == 1,
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
