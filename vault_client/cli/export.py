"""``vault export STREAM --to PATH``: the stream (or part of it) as Parquet or NDJSON."""

from __future__ import annotations

import time
from pathlib import Path

import click

from vault_client.cli.args import stream_name
from vault_client.cli.options import format_option
from vault_client.cli.progress import human_bytes, progress_bar, rate
from vault_client.cli.settings import connection_options, settings
from vault_client.exporters import FORMATS, export_format, exporter_for
from vault_client.rawlog import check_boundary, open_log
from vault_core.errors import InvalidInput
from vault_core.reader import scan_log_batches


@click.command()
@click.argument("stream", callback=stream_name)
@click.option(
    "--to",
    "path",
    required=True,
    metavar="PATH.parquet|PATH.ndjson",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="The file to write.",
)
@format_option(FORMATS, "Default: from the file's suffix.")
@click.option(
    "--from",
    "start",
    type=click.IntRange(min=0),
    default=0,
    metavar="OFFSET",
    help="First offset to export (a record boundary).",
)
@click.option("--direct", is_flag=True, help="Read the blob directly with a SAS from the API.")
@connection_options()
def export(stream: str, path: Path, fmt: str | None, start: int, direct: bool) -> None:
    """Write STREAM to a Parquet or NDJSON file.

    Exports up to the committed end as it was when the export started.
    Every record's checksum is verified on this machine. Parquet columns: offset (int64),
    timestamp (timestamp[ms, UTC]), id (string), key (binary), value (binary). The file
    appears under PATH only when complete.
    """
    try:
        fmt = export_format(path, fmt)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="'--to'") from None
    s = settings()
    api = s.api()
    blob = open_log(api, stream, direct=direct)
    committed = blob.state().committed
    check_boundary(api, stream, start, committed)
    exporter = exporter_for(path, fmt)
    count = 0
    started = time.monotonic()
    try:
        with progress_bar(s.quiet) as bar:
            task = bar.add_task(f"exporting {stream}", total=committed - start, messages=0)
            for batch in scan_log_batches(blob, start, committed):
                exporter.write_batch(batch)
                count += len(batch)
                bar.update(task, completed=batch.next_offset - start, messages=count)
            bar.update(task, completed=committed - start, messages=count)
    except BaseException:
        exporter.abort()
        raise
    exporter.commit()
    seconds = time.monotonic() - started
    if not s.quiet:
        size = committed - start
        click.echo(
            f"exported {count:,} messages ({human_bytes(size)} of log) from {stream!r} to {path} "
            f"in {seconds:.2f} s: {rate(count, seconds):,.0f} msg/s"
        )
