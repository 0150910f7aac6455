"""Verifying a whole stream: every checksum, offset continuity, and the commit record's count.

Reads the raw log with :func:`vault_core.reader.scan_log_batches` in *skip* mode, so one corrupt
record does not hide the rest: each unreadable byte range is reported with its offsets. The
checks run a batch (a unit, or a run of records) at a time: a batch's messages are contiguous by
construction, so only where one batch meets the next, and the timestamps, need looking at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import lt

from vault_core.errors import FormatError
from vault_core.pagelog import ReadableLog
from vault_core.reader import ScanOptions, scan_log_batches

PROGRESS_EVERY = 4096


@dataclass(frozen=True)
class Problem:
    offset: int
    what: str


@dataclass
class VerifyReport:
    stream: str
    committed: int
    expected_count: int
    records: int = 0
    record_bytes: int = 0
    first_ts: int | None = None
    last_ts: int | None = None
    time_regressions: int = 0
    """Records stamped earlier than the one before them (a writer clock that went back): a warning."""
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_log(blob: ReadableLog, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Read ``blob`` from 0 to its committed length; ``progress(bytes, records)`` is called now and then."""
    state = blob.state()
    report = VerifyReport(blob.stream, state.committed, state.count)
    expected = 0
    skipped = False

    def on_skip(offset: int, length: int) -> None:
        nonlocal skipped
        skipped = True

    try:
        for batch in scan_log_batches(
            blob, 0, state.committed, ScanOptions(skip_corrupt=True, on_skip=on_skip)
        ):
            first = batch.first_offset
            if first != expected:
                what = "corrupt records skipped" if skipped else "gap between records"
                report.problems.append(Problem(expected, f"{what}: bytes {expected}-{first - 1}"))
            stamps = batch.timestamps
            if report.last_ts is not None and stamps[0] < report.last_ts:
                report.time_regressions += 1
            report.time_regressions += sum(map(lt, stamps[1:], stamps[:-1]))
            report.first_ts = stamps[0] if report.first_ts is None else report.first_ts
            report.last_ts = stamps[-1]
            before = report.records
            report.records += len(batch)
            report.record_bytes += batch.log_bytes
            expected = batch.next_offset
            if progress is not None and report.records // PROGRESS_EVERY > before // PROGRESS_EVERY:
                progress(expected, report.records)
    except FormatError as exc:
        at = exc.offset if exc.offset is not None else expected
        report.problems.append(Problem(at, str(exc)))
        expected = state.committed  # the scan cannot go on past this; the error says why
    if expected != state.committed:
        report.problems.append(
            Problem(
                expected, f"bytes {expected}-{state.committed - 1} before the committed end are not a record"
            )
        )
    if report.ok and report.records != state.count:
        report.problems.append(
            Problem(
                state.committed,
                f"the commit record counts {state.count} messages, the log holds {report.records}",
            )
        )
    if progress is not None:
        progress(state.committed, report.records)
    return report
