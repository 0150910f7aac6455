"""``vault poison list`` and ``vault poison replay``: what the writers gave up on, and putting it back.

Replaying is safe whatever the cause was: batch ids make every append once-only per stream,
so a batch that is (or becomes) committed is dropped by the writer, never written twice.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from vault_client.api import ApiClient
from vault_client.cli.args import optional_batch_id, optional_stream_name
from vault_client.cli.settings import connection_options, settings
from vault_client.cli.show import console, number, print_json
from vault_client.wire import iso

PREVIEW = 60
"""Characters of a message that is not a batch shown in the table (``--json`` has 200)."""


def _filters(f: Any) -> Any:
    f = click.option(
        "--batch", "batch_id", metavar="ID", callback=optional_batch_id, help="Only the batch with this id."
    )(f)
    return click.option(
        "--stream", metavar="STREAM", callback=optional_stream_name, help="Only this stream's batches."
    )(f)


@click.group()
def poison() -> None:
    """List and replay the batches parked in the poison queues.

    Both need the function key (--key or VAULT_KEY).
    """


@poison.command("list")
@_filters
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@connection_options()
def list_command(stream: str | None, batch_id: str | None, as_json: bool) -> None:
    """List poisoned batches and messages that are not batches at all.

    Per message: its staging queue, batch, stream, message count, inline or claim-check, when
    it was poisoned, and the batch's status with the rejection reason. The queue service shows
    at most the 32 oldest messages of each poison queue; the footer says when there are more.
    """
    doc = settings().api().poison(stream, batch_id)
    if as_json:
        print_json(doc)
        return
    if doc["messages"]:
        console().print(_table(doc["messages"]))
    else:
        click.echo("no poisoned messages" + (" match" if stream or batch_id else ""))
    for q in doc["queues"]:
        if q["truncated"]:
            click.echo(
                f"{_queue(q)}-poison holds about {number(q['poison_messages'])} messages; "
                f"the {q['peeked']} oldest were looked at (vault poison replay reaches them all)"
            )


def _queue(row: dict[str, Any]) -> str:
    return row["queue"] if not row["account"] else f"{row['queue']} (account {row['account']})"


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        "queue", "message id", "batch", "stream", "messages", "kind", "poisoned", "status", "reason", box=None
    )
    for r in rows:
        kind = "invalid" if not r["valid"] else "claim-check" if r["claim_check"] else "inline"
        table.add_row(
            _queue(r),
            r["message_id"],
            r["batch_id"] or "",
            r["stream"] or "",
            number(r["count"]),
            kind,
            iso(r["inserted"]),
            r["status"] or "",
            f"{r['error']}: {r['preview'][:PREVIEW]!r}" if not r["valid"] else r["reason"] or "",
        )
    return table


@poison.command()
@_filters
@click.option("--json", "as_json", is_flag=True, help="Print the API's answers, merged, as JSON.")
@connection_options()
def replay(stream: str | None, batch_id: str | None, as_json: bool) -> None:
    """Send poisoned batches back to their staging queues (all of them, unless filtered).

    Safe: a batch already committed is not appended again. Messages that are not batches stay
    in poison and are listed. Asks the API round after round until the poison queues have been
    read to their ends (or a round brings back no new batch).
    """
    s = settings()
    result = _replay_all(s.api(), stream, batch_id)
    if as_json:
        print_json(result)
        return
    if not s.quiet:
        for b in result["batches"]:
            click.echo(
                f"replayed {b['batch_id']} ({number(b['count'])} messages of stream {b['stream']}) "
                f"to {_queue(b)}"
            )
        for m in result["invalid_messages"]:
            click.echo(f"left in {_queue(m)}-poison: message {m['message_id']}: {m['error']}")
    click.echo(_summary(result))


def _replay_all(api: ApiClient, stream: str | None, batch_id: str | None) -> dict[str, Any]:
    """Replay rounds until one reads every poison queue to its end or replays no new batch.

    The second condition ends the loop when the writer fails a batch again at once (each round
    would find it back in poison) or when a filter's batches lie beyond what one round reads.
    """
    batches: dict[tuple[str, str], dict[str, Any]] = {}
    invalid: dict[str, dict[str, Any]] = {}
    rounds = 0
    while True:
        doc = api.replay_poison(stream, batch_id)
        rounds += 1
        this_round = {(b["stream"], b["batch_id"]): b for b in doc["batches"]}
        new = this_round.keys() - batches.keys()
        batches.update(this_round)
        invalid.update({m["message_id"]: m for m in doc["invalid_messages"]})
        if doc["complete"] or not new:
            break
    return {
        "replayed": len(batches),
        "invalid": len(invalid),
        "complete": doc["complete"],
        "rounds": rounds,
        "batches": list(batches.values()),
        "invalid_messages": list(invalid.values()),
    }


def _summary(result: dict[str, Any]) -> str:
    n = result["replayed"]
    text = f"replayed {n:,} batch{'' if n == 1 else 'es'}"
    if result["invalid"]:
        text += f"; {result['invalid']:,} message(s) that are not batches stay in poison"
    if not result["complete"]:
        text += "; stopped before the end of the poison queues, run it again to go on"
    return text
