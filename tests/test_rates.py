"""Ingest rates from the writer's minute marks (docs/ARCHITECTURE.md §11), on a real Azurite."""

from __future__ import annotations

from typing import cast

from vault_core.clock import ManualClock
from vault_core.index import MINUTE_MS, IndexPoint
from vault_core.rates import per_minute
from vault_core.recordformat import NewMessage
from vault_core.rows import KeyRange
from vault_core.tables import AzureTable
from vault_core.vault import Vault
from vault_core.writer import Batch

T0 = 1_750_000_020_000  # 20 s into a minute
HOUR = 60 * MINUTE_MS


def batch(n: int, size: int = 10) -> Batch:
    return Batch([NewMessage(b"x" * size) for _ in range(n)])


def write_minutes(vault: Vault, stream: str, clock: ManualClock) -> None:
    """5 messages in the first minute (two commits), 1 in the next, 4 three minutes later."""
    with Vault(vault.account, clock=clock).writer(stream) as w:
        w.append([batch(3)])
        clock.advance(20_000)
        w.append([batch(2)])
        clock.advance(60_000)
        w.append([batch(1)])
        clock.advance(3 * MINUTE_MS)
        w.append([batch(4, size=100)])


def test_each_minute_counts_exactly_its_own_messages_and_bytes(vault: Vault, stream: str) -> None:
    clock = ManualClock(T0)
    write_minutes(vault, stream, clock)
    now = clock.now_ms() + 5_000
    marks = vault.index.minute_marks(stream, now - HOUR, now)
    assert [m.timestamp // MINUTE_MS for m in marks] == [T0 // MINUTE_MS + i for i in (0, 1, 4)]
    assert [m.count for m in marks] == [0, 5, 6]
    state = vault.reader.state(stream)
    rates = per_minute(marks, state.committed, state.count, now - 5 * MINUTE_MS, now)
    assert [r.messages for r in rates] == [0, 5, 1, 0, 0, 4]
    assert sum(r.bytes for r in rates) == state.committed
    assert rates[-1].bytes == state.committed - marks[-1].offset
    assert rates[0].seconds == 60.0 and rates[-1].seconds == (now % MINUTE_MS) / 1000


def test_lost_marks_are_re_derived_from_the_log_by_the_next_writer(vault: Vault, stream: str) -> None:
    clock = ManualClock(T0)
    write_minutes(vault, stream, clock)
    now = clock.now_ms()
    before = vault.index.minute_marks(stream, 0, now)
    for row in vault.index.index.query(KeyRange(stream)):
        if row.key[0] in "mot":  # marks and index points: derived data, all lost
            vault.index.index.delete(stream, row.key)
    assert vault.index.minute_marks(stream, 0, now) == []
    Vault(vault.account, clock=clock).writer(stream).close()  # opening recovers the derived data from the log
    assert vault.index.minute_marks(stream, 0, now) == before


def test_minutes_outside_the_window_and_a_silent_stream() -> None:
    marks = [IndexPoint(0, 10 * MINUTE_MS, 0), IndexPoint(500, 70 * MINUTE_MS + 3, 5)]
    rates = per_minute(marks, 800, 9, 69 * MINUTE_MS, 71 * MINUTE_MS + 30_000)
    assert [(r.start, r.messages, r.bytes) for r in rates] == [
        (69 * MINUTE_MS, 0, 0),
        (70 * MINUTE_MS, 4, 300),
        (71 * MINUTE_MS, 0, 0),
    ]
    assert rates[-1].seconds == 30.0
    assert [r.messages for r in per_minute([], 0, 0, 0, 2 * MINUTE_MS)] == [0, 0, 0]


def test_marks_cost_the_writer_no_request_of_their_own(vault: Vault, stream: str) -> None:
    """A mark rides in the table transaction of the commit's batch rows: one per commit, as before."""
    clock = ManualClock(T0)
    v = Vault(vault.account, clock=clock)
    sent: list[list[str]] = []
    table = cast(AzureTable, v.index.index).client
    submit = table.submit_transaction

    def counting(operations: list[tuple[str, dict[str, object], dict[str, object]]], **kw: object) -> object:
        sent.append([str(op[1]["RowKey"])[0] for op in operations])
        return submit(operations, **kw)

    table.submit_transaction = counting  # type: ignore[method-assign,assignment]
    with v.writer(stream) as w:
        sent.clear()  # opening the stream writes its own rows
        for i in range(12):  # a commit every 20 s: four minutes
            w.append([Batch([NewMessage(b"x")], f"batch-{i}")])
            clock.advance(20_000)
    assert len(sent) == 12
    assert (
        sum(kinds.count("m") for kinds in sent) == len(v.index.minute_marks(stream, 0, clock.now_ms())) == 4
    )
