"""``vault verify STREAM``: read the whole stream, check every checksum and offset; exit 1 on problems."""

from __future__ import annotations

import click

from vault_client.cli.args import stream_name
from vault_client.cli.progress import progress_bar
from vault_client.cli.settings import connection_options, settings
from vault_client.rawlog import open_log
from vault_client.verify import verify_log
from vault_client.wire import iso

MAX_LISTED = 20


@click.command()
@click.argument("stream", callback=stream_name)
@click.option("--direct", is_flag=True, help="Read the blob directly with a SAS from the API.")
@connection_options()
def verify(stream: str, direct: bool) -> None:
    """Verify every record of STREAM.

    Checks checksums, offset continuity, and the commit record's message count.
    The raw log is decoded on this machine (through the API's /log route, or --direct from
    the blob). Prints counts, bytes and every problem; exits 1 if there is any.
    """
    s = settings()
    blob = open_log(s.api(), stream, direct=direct)
    with progress_bar(s.quiet) as bar:
        task = bar.add_task(f"verifying {stream}", total=None, messages=0)

        def progress(done: int, records: int) -> None:
            bar.update(task, completed=done, messages=records)

        report = verify_log(blob, progress)
    click.echo(f"stream         {report.stream}")
    click.echo(f"committed      {report.committed:,} bytes")
    click.echo(
        f"records        {report.records:,} verified ({report.record_bytes:,} bytes); "
        f"the commit record counts {report.expected_count:,}"
    )
    if report.records:
        click.echo(f"timestamps     {iso(report.first_ts)} .. {iso(report.last_ts)}")
    if report.time_regressions:
        click.echo(
            f"warning        {report.time_regressions:,} records are stamped earlier than "
            "the record before them"
        )
    for problem in report.problems[:MAX_LISTED]:
        click.echo(f"problem        at offset {problem.offset}: {problem.what}")
    if len(report.problems) > MAX_LISTED:
        click.echo(f"problem        ... and {len(report.problems) - MAX_LISTED} more")
    if not report.ok:
        raise click.ClickException(
            f"stream {stream!r} failed verification: {len(report.problems)} problem(s)"
        )
    click.echo("result         OK")
