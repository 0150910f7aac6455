"""The stream writer: appends batches to one stream's page blob while holding its lease.

Protocol of one append (see docs/FORMAT.md §6 for the commit record):

1. Records are laid out from the committed length ``C``. Writing starts at the page that
   holds ``C`` (``C`` rounded down to 512), re-sending the committed bytes of that partial
   page (the *tail*) so no batch is padded to a page boundary in the log.
2. Pages go out in writes of at most 4 MiB, each under the lease and ``If-Match`` the ETag
   of the previous write, so nobody else's write can slip in between.
3. One ``Set Blob Metadata`` (lease + ``If-Match``) moves ``committed`` past the new records.
   Until it succeeds readers see none of the new records; after it they see all of them.
4. The index and catalog (derived data) are updated; batch ids become duplicates.

A crash anywhere leaves the commit record as it was before step 3 or after it: the next
writer resumes from ``committed`` and overwrites whatever lies past it, and re-derives the
index rows of the last commit (its batch ids travel in the commit record itself).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import chain
from types import TracebackType

from vault_core import codecs
from vault_core.clock import Clock, SystemClock
from vault_core.errors import FormatError, LeaseLost, StreamFull, StreamNotFound, VaultError
from vault_core.index import IndexPoint, IndexTables, starts_minute
from vault_core.names import validate_batch_id
from vault_core.pagelog import (
    MAX_PAGE_BLOB_SIZE,
    MAX_PAGE_WRITE,
    PAGE_SIZE,
    CommitState,
    CommittedBatch,
    HeldLease,
    PageLog,
    Pieces,
    pieces_of,
)
from vault_core.recordformat import (
    MAX_KEY_BYTES,
    MAX_TIMESTAMP_MS,
    MAX_VALUE_BYTES,
    EncodedBatch,
    NewMessage,
    check_limits,
    encode_into,
    encoded_fields,
    restamp,
)
from vault_core.stagedunits import (
    Field,
    StagedUnits,
    copies_as_is,
    cut_units,
    message_fields,
    unit_fields,
)
from vault_core.unitformat import (
    MAX_PAYLOAD_BYTES,
    UNIT_TARGET_BYTES,
    UNIT_VERSION,
    SealedUnit,
    encode_unit,
    restamped_unit,
)

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60
INDEX_SPACING = 1024 * 1024
"""One index point per MiB of log: a time seek scans at most about this much."""
MAX_BATCHES_PER_COMMIT = 48
"""Batch ids ride in the commit record's metadata (8 KiB limit for all of it)."""
MIN_GROWTH = 16 * 1024 * 1024
MAX_GROWTH = 1024**3
CATALOG_INTERVAL_MS = 1000
"""The catalog row is refreshed at most this often per writer (and on close): it is a summary."""
DEFAULT_RECORD_FORMAT = UNIT_VERSION
"""New commits are written as version 2 units (docs/FORMAT.md §11) unless a writer is told 1."""


@dataclass(frozen=True)
class WriterSettings:
    """How a writer writes, named once: the app, tools and tests pass one of these down
    to :meth:`StreamWriter.open` (``Vault.writer``) instead of each repeating the keywords."""

    lease_seconds: int = DEFAULT_LEASE_SECONDS
    """The blob lease's duration; the writer renews it once a third of it has passed."""
    index_spacing: int = INDEX_SPACING
    max_write: int = MAX_PAGE_WRITE
    """Most bytes per page write (Azure's limit; tests make it smaller to split commits)."""
    record_format: int = DEFAULT_RECORD_FORMAT
    """1: version 1 records, one per message; 2: version 2 units (a commit at a time)."""
    codec: int = codecs.CODECS[codecs.DEFAULT_CODEC]
    """How version 2 units are compressed (``vault_core.codecs``)."""
    unit_bytes: int = UNIT_TARGET_BYTES
    """The payload a version 2 unit closes before passing (the format bench compares sizes)."""

    def __post_init__(self) -> None:
        if self.record_format not in (1, UNIT_VERSION) or self.codec not in codecs.CODEC_NAMES:
            raise ValueError(f"record format {self.record_format} / codec {self.codec} unknown")
        if not 0 < self.unit_bytes <= MAX_PAYLOAD_BYTES:
            raise ValueError(f"unit_bytes must be 1-{MAX_PAYLOAD_BYTES}, got {self.unit_bytes}")


@dataclass(frozen=True)
class Batch:
    """Messages that must be appended together: all of them or none."""

    messages: Sequence[NewMessage]
    batch_id: str | None = None
    """Producer-chosen id; a batch whose id is already committed is not appended again."""
    encoded: EncodedBatch | None = None
    """The batch already in record form (a claim-check body), instead of ``messages``: the
    writer copies its records and re-stamps offsets and time rather than encoding each one."""
    units: StagedUnits | None = None
    """The batch already as version 2 units (a claim-check body of a format 2 app), instead of
    ``messages``: a version 2 writer copies each full enough unit and re-stamps its header."""

    @classmethod
    def of_records(cls, records: EncodedBatch, batch_id: str | None = None) -> Batch:
        return cls((), batch_id, records)

    @classmethod
    def of_units(cls, units: StagedUnits, batch_id: str | None = None) -> Batch:
        return cls((), batch_id, units=units)

    @property
    def count(self) -> int:
        if self.units is not None:
            return self.units.messages
        return len(self.encoded.starts) if self.encoded is not None else len(self.messages)


@dataclass(frozen=True)
class AppendResult:
    batch_id: str | None
    first_offset: int
    next_offset: int
    count: int
    timestamp: int
    duplicate: bool = False
    """True when the batch id was already committed; the offsets are the original ones."""
    pieces: Pieces = ()
    """Where the messages of a batch written as version 2 units lie: ``(offset, count)`` runs of
    consecutive offsets, one per unit it spans (CommittedBatch.pieces); empty for records."""


@dataclass
class _Group:
    batches: list[tuple[int, Batch]] = field(default_factory=list)


class _IndexPoints:
    """The index-point rule, written once: a point at the stream's first frame, then at each
    frame that starts ``spacing`` bytes or more after the last point (never two at one offset).
    A frame is where decoding can start: a version 1 record, or a version 2 unit. Collects the
    points a commit (or a recovery) adds after ``last``."""

    def __init__(self, spacing: int, last: IndexPoint | None) -> None:
        self.spacing = spacing
        self.last = last
        self.added: list[IndexPoint] = []

    def frame(self, offset: int, timestamp: int, count: int) -> None:
        """A frame starts at ``offset`` with the stream's message number ``count``."""
        last = self.last
        if last is None or (offset > last.offset and offset - last.offset >= self.spacing):
            self.last = IndexPoint(offset, timestamp, count)
            self.added.append(self.last)


def _round_up(n: int, to: int = PAGE_SIZE) -> int:
    return (n + to - 1) // to * to


class StreamWriter:
    """Single writer of one stream. Use :meth:`open`, then :meth:`append`, then :meth:`close`."""

    def __init__(
        self,
        blob: PageLog,
        index: IndexTables,
        lease: HeldLease,
        state: CommitState,
        *,
        clock: Clock,
        settings: WriterSettings,
    ) -> None:
        self.blob = blob
        self.settings = settings
        self.stream = blob.stream
        self.index = index
        self.lease = lease
        self.state = state
        self.clock = clock
        self._renewed_at = clock.monotonic()
        self._tail = b""
        self._last_point: IndexPoint | None = None
        self._catalog_written_ms = 0
        self._stale = True  # re-read state before the first append
        self._closed = False
        self._recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mv-index-{self.stream}")
        self._uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mv-pages-{self.stream}")
        self._recording: Future[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        blob: PageLog,
        index: IndexTables,
        settings: WriterSettings | None = None,
        *,
        clock: Clock | None = None,
        lease_id: str | None = None,
    ) -> StreamWriter:
        """Create the stream if needed, take its lease and recover from the commit record.

        Raises :class:`~vault_core.errors.StreamLeased` if another writer holds the lease.
        ``lease_id``: the lease's id, when the caller succeeds writers that may have died
        holding it (it must make sure no live writer shares the id: the ETag checks of every
        write still keep a second one from writing, but it would fail rather than wait).
        """
        clock = clock or SystemClock()
        settings = settings or WriterSettings()
        try:  # one request for a stream that exists, the usual case (a takeover is one)
            lease = blob.acquire_lease(settings.lease_seconds, lease_id)
        except StreamNotFound:
            blob.create_if_missing()
            lease = blob.acquire_lease(settings.lease_seconds, lease_id)
        writer = cls(blob, index, lease, CommitState(), clock=clock, settings=settings)
        try:
            writer._recover()
        except BaseException:
            writer._recorder.shutdown(wait=False)
            writer._uploader.shutdown(wait=False)
            writer._release()
            raise
        return writer

    def close(self) -> None:
        """Refresh the catalog and release the lease (another writer may take over at once)."""
        if self._closed:
            return
        try:
            self._wait_recorded()
            if not self._stale:
                self.index.record_commit(self.stream, self.state, [], [], self.clock.now_ms())
        finally:
            self._recorder.shutdown(wait=True)
            self._uploader.shutdown(wait=True)
            self._release()

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _release(self) -> None:
        self._closed = True
        try:
            self.lease.release()
        except VaultError as exc:  # an expired or broken lease needs no release
            log.info("lease on %s not released: %s", self.stream, exc)

    # -- recovery ----------------------------------------------------------------------
    def _recover(self) -> None:
        """Load the commit record and make the derived data (index, catalog, batch ids) match it.

        Only the last commit's rows can be missing (each commit first waits for the previous
        one's, ``_wait_recorded``), and they are written in one ``record_index`` call whose
        batch rows come last: if every batch row of the last commit is in Tables, so is every
        index point and minute mark, and the log is not scanned again. That keeps the takeover
        of a stream from a writer that died (docs/ARCHITECTURE.md §3.7) to a few requests,
        without decoding every message since the last index point."""
        state = self.blob.state()
        self.state = state
        page_start = state.committed // PAGE_SIZE * PAGE_SIZE
        # Independent reads side by side: the tail page and the catalog row beside the index.
        tail = self._uploader.submit(self.blob.read, page_start, state.committed - page_start)
        registered = self._recorder.submit(self.index.register_stream, self.stream, self.clock.now_ms())
        last = self.index.last_point(self.stream)
        ids = [b.batch_id for b in state.batches]
        recorded = self.index.committed_batches(self.stream, ids) if ids else {}
        self._tail = tail.result()
        registered.result()
        points: list[IndexPoint] = []
        minutes: list[IndexPoint] = []
        batches: tuple[CommittedBatch, ...] = ()
        # Else the last commit's rows, and so every row before them, are in Tables already.
        if not ids or not all(i in recorded for i in ids):
            points, minutes = self._reindex(last, state.committed) if state.committed else ([], [])
            batches = self._with_pieces(state, recorded)
        self.index.record_commit(self.stream, state, points, batches, self.clock.now_ms(), minutes)
        self._last_point = points[-1] if points else last
        self._stale = False

    def _with_pieces(
        self, state: CommitState, recorded: dict[str, CommittedBatch]
    ) -> tuple[CommittedBatch, ...]:
        """The last commit's batches with their pieces, which the commit record does not carry:
        as the index's batch rows have them (``recorded``), else re-derived from the log (the last
        writer died before it recorded the commit). A commit in units begins with a unit, where
        its first batch begins; where that does not hold (a first batch without id), none are
        derived."""
        from vault_core.reader import scan_log  # the reader depends on nothing in this module

        if state.format < UNIT_VERSION or not state.batches:
            return state.batches
        missing = [b for b in state.batches if b.batch_id not in recorded]
        if not missing:
            return tuple(recorded[b.batch_id] for b in state.batches)
        start = min(b.first_offset for b in state.batches)
        missing.sort(key=lambda b: b.first_offset)
        firsts = [b.first_offset for b in missing]
        offsets: dict[str, list[int]] = {b.batch_id: [] for b in missing}
        try:
            for m in scan_log(self.blob, start, missing[-1].next_offset):
                b = missing[bisect.bisect_right(firsts, m.offset) - 1]
                if b.first_offset <= m.offset < b.next_offset and m.end:  # in a unit (not a record)
                    offsets[b.batch_id].append(m.offset)
        except FormatError as exc:
            log.info("pieces of the last commit of %s not derived: %s", self.stream, exc)
            return state.batches
        derived = {
            b.batch_id: replace(b, pieces=pieces_of(offsets[b.batch_id]))
            for b in missing
            if len(offsets[b.batch_id]) == b.count
        }
        return tuple(recorded.get(b.batch_id) or derived.get(b.batch_id) or b for b in state.batches)

    def _reindex(self, last: IndexPoint | None, committed: int) -> tuple[list[IndexPoint], list[IndexPoint]]:
        """Index points and minute marks after the last recorded point, re-derived from the log.

        The marks of the last point's commit were written with it (``record_index``), so the
        record at ``last`` itself is not marked again."""
        from vault_core.reader import scan_log  # the reader depends on nothing in this module

        start = last.offset if last else 0
        index = _IndexPoints(self.settings.index_spacing, last)
        minutes: list[IndexPoint] = []
        count = last.count if last else 0
        previous_ts: int | None = None
        starts_frame = True  # ``start`` is a record's or a unit's position
        for message in scan_log(self.blob, start, committed):
            at_frame, starts_frame = starts_frame, message.ends_frame
            if at_frame:
                index.frame(message.offset, message.timestamp, count)
            if (message.offset == 0 or previous_ts is not None) and starts_minute(
                previous_ts, message.timestamp
            ):
                minutes.append(IndexPoint(message.offset, message.timestamp, count))
            previous_ts = message.timestamp
            count += 1
        return index.added, minutes

    def _refresh(self) -> None:
        """After a failed call: recover as a new writer would (we still hold the lease).

        Always the full recovery: a failed background index write must be redone from the
        commit record before the next commit replaces the batch ids it carries.
        """
        self._keep_lease(force=True)
        self._recording = None
        self._recover()

    # -- appending ---------------------------------------------------------------------
    def append(self, batches: Iterable[Batch]) -> list[AppendResult]:
        """Append ``batches`` in order; each is all-or-nothing. Results are in input order.

        Batches whose id is already committed (a redelivery) are returned with their original
        offsets and ``duplicate=True`` and are not written again.
        """
        if self._closed:
            raise LeaseLost(f"the writer of stream {self.stream!r} is closed")
        batches = list(batches)
        for batch in batches:
            if batch.batch_id is not None:
                validate_batch_id(batch.batch_id)
            for m in batch.messages:
                # Lengths only (a str key is at most 4 bytes per character): refuse a bad batch
                # before writing anything, without encoding every key twice on the hot path.
                if len(m.value) > MAX_VALUE_BYTES or len(m.key) * 4 > MAX_KEY_BYTES:
                    check_limits(m.key_bytes()[0], m.value)
        try:
            if self._stale:
                self._refresh()
            return self._append(batches)
        except LeaseLost:
            self._closed = True
            raise
        except BaseException:
            self._stale = True
            raise

    def _append(self, batches: list[Batch]) -> list[AppendResult]:
        results: dict[int, AppendResult] = {}
        ids = [b.batch_id for b in batches if b.batch_id]
        known = {b.batch_id: b for b in self.state.batches}
        if ids:
            known.update(self.index.committed_batches(self.stream, ids))
        in_call: set[str] = set()  # ids appended earlier in this same call, in any group
        group = _Group()
        for i, batch in enumerate(batches):
            if batch.batch_id and batch.batch_id in known:
                results[i] = _duplicate(known[batch.batch_id])
                continue
            if batch.batch_id and batch.batch_id in in_call:
                results[i] = AppendResult(batch.batch_id, -1, -1, 0, 0, duplicate=True)  # filled below
                continue
            if batch.batch_id:
                in_call.add(batch.batch_id)
            group.batches.append((i, batch))
            if len(group.batches) >= MAX_BATCHES_PER_COMMIT:
                results.update(self._commit_group(group))
                group = _Group()
        if group.batches:
            results.update(self._commit_group(group))
        by_id = {r.batch_id: r for r in results.values() if r.batch_id and not r.duplicate}
        for i, r in results.items():
            if r.duplicate and r.first_offset < 0 and r.batch_id in by_id:
                results[i] = replace(by_id[r.batch_id], duplicate=True)
        return [results[i] for i in range(len(batches))]

    def _commit_group(self, group: _Group) -> dict[int, AppendResult]:
        state = self.state
        assert state.etag is not None
        ts = max(self.clock.now_ms(), state.last_ts or 0)
        if ts > MAX_TIMESTAMP_MS:
            raise ValueError(f"timestamp {ts} does not fit the format's 48 bits")
        write_pos = state.committed // PAGE_SIZE * PAGE_SIZE
        buf = bytearray(self._tail)
        offset = state.committed
        count = state.count
        pages = _PagePipeline(self._write, state.etag, self._uploader)
        index = _IndexPoints(self.settings.index_spacing, self._last_point)
        results: dict[int, AppendResult] = {}
        committed_batches: list[CommittedBatch] = []
        try:
            as_records = group.batches  # format 1: one record per message, laid out below
            if self.settings.record_format == UNIT_VERSION:
                laid = self._lay_out_units(group, buf, pages, write_pos, offset, count, ts, index)
                offset, count, write_pos, spans = laid
                as_records = []
                for i, batch, first, nxt, pieces in spans:
                    result = AppendResult(batch.batch_id, first, nxt, batch.count, ts, pieces=pieces)
                    results[i] = result
                    if batch.batch_id:
                        committed_batches.append(
                            CommittedBatch(batch.batch_id, first, nxt, result.count, ts, pieces)
                        )
            for i, batch in as_records:
                first = offset
                if batch.encoded is not None:
                    encoded = batch.encoded
                    at = len(buf)
                    buf += encoded.data
                    restamp(buf, at, encoded.starts, offset, ts)
                    for start in encoded.starts:
                        index.frame(offset + start, ts, count)
                        count += 1
                    offset += len(encoded.data)
                for message in _messages(batch):
                    index.frame(offset, ts, count)
                    offset += encode_into(buf, message, offset, ts)
                    count += 1
                    if len(buf) >= self.settings.max_write:
                        write_pos = self._send_full(pages, buf, write_pos)
                write_pos = self._send_full(pages, buf, write_pos)
                result = AppendResult(batch.batch_id, first, offset, batch.count, ts)
                results[i] = result
                if batch.batch_id:
                    committed_batches.append(CommittedBatch(batch.batch_id, first, offset, result.count, ts))
            tail_len = len(buf) % PAGE_SIZE
            tail = bytes(buf[len(buf) - tail_len :])
            if buf:
                buf += bytes(_round_up(len(buf)) - len(buf))
                pages.send(write_pos, bytes(buf))
            etag = pages.finish()
        except BaseException:
            pages.abandon()
            raise
        # The group's first record opens a minute when the stream's last one was stamped earlier.
        added = count > state.count
        minutes = (
            [IndexPoint(state.committed, ts, state.count)]
            if added and starts_minute(state.last_ts, ts)
            else []
        )
        new_state = replace(
            self.state,  # not ``state``: _grow() may have recorded a larger blob since
            committed=offset,
            count=count,
            first_ts=state.first_ts if state.first_ts is not None else (ts if added else None),
            last_ts=ts if added else state.last_ts,
            batches=tuple(committed_batches),
            format=max(state.format, self.settings.record_format) if added else state.format,
        )
        self._keep_lease()
        self._wait_recorded()  # the previous commit's batch ids must be in Tables before mv_batches changes
        etag = self.blob.commit(new_state, self.lease, etag)
        self.state = replace(new_state, etag=etag)
        self._tail = tail
        self._last_point = index.last
        points = index.added
        now = self.clock.now_ms()
        if points or committed_batches or minutes or now - self._catalog_written_ms >= CATALOG_INTERVAL_MS:
            self._record(points, committed_batches, minutes, now)
        return results

    def _lay_out_units(
        self,
        group: _Group,
        buf: bytearray,
        pages: _PagePipeline,
        write_pos: int,
        offset: int,
        count: int,
        ts: int,
        index: _IndexPoints,
    ) -> tuple[int, int, int, list[tuple[int, Batch, int, int, Pieces]]]:
        """Encode the group's messages as version 2 units after ``buf`` (docs/FORMAT.md §11.7).

        Units hold consecutive messages, across batch boundaries, up to ``unit_bytes`` of payload
        (UNIT_TARGET_BYTES) or UNIT_TARGET_MESSAGES messages, and only text keys or only binary
        keys; a batch staged as units (``Batch.units``) has each unit that is full enough and
        compressed with this writer's codec copied as it is, re-stamped (stagedunits), and the
        messages of the others packed with their neighbours. A message's offset is its unit's
        position plus its index there, known once the unit is compressed. Returns the new offset,
        count and write position, and each batch's ``(i, batch, first, next, pieces)`` (its
        pieces: one run of consecutive offsets per unit it spans); index points (at unit positions
        only: decoding starts there) go to ``index``.
        """
        unit_offsets: list[int] = []
        unit_firsts: list[int] = []  # index in the group of each unit's first message
        ranges: list[tuple[int, Batch, int, int]] = []
        seen = 0  # messages of the group so far
        for i, batch in group.batches:
            ranges.append((i, batch, seen, seen + batch.count))
            seen += batch.count
        seen = 0

        def place(unit: bytes, messages: int) -> None:
            nonlocal offset, count, write_pos, seen
            index.frame(offset, ts, count)
            unit_offsets.append(offset)
            unit_firsts.append(seen)
            buf.extend(unit)
            offset += len(unit)
            count += messages
            seen += messages
            write_pos = self._send_full(pages, buf, write_pos)

        codec, unit_bytes = self.settings.codec, self.settings.unit_bytes
        for run in _unit_runs([batch for _, batch in group.batches], codec, unit_bytes):
            if isinstance(run, SealedUnit):
                place(restamped_unit(run, offset, ts), run.size)
                continue
            for keys, values, text in cut_units(run, unit_bytes):
                place(encode_unit(keys, values, offset, ts, codec=codec, key_is_text=text), len(values))
        assert seen == (ranges[-1][3] if ranges else 0)

        def offset_of(g: int) -> int:
            if g == seen:
                return offset
            u = bisect.bisect_right(unit_firsts, g) - 1
            return unit_offsets[u] + g - unit_firsts[u]

        def pieces(g0: int, g1: int) -> Pieces:
            if g0 == g1:
                return ()
            u = bisect.bisect_right(unit_firsts, g0) - 1
            runs = []
            while u < len(unit_firsts) and unit_firsts[u] < g1:
                start = max(g0, unit_firsts[u])
                stop = min(g1, unit_firsts[u + 1] if u + 1 < len(unit_firsts) else seen)
                runs.append((unit_offsets[u] + start - unit_firsts[u], stop - start))
                u += 1
            return tuple(runs)

        spans = [(i, batch, offset_of(g0), offset_of(g1), pieces(g0, g1)) for i, batch, g0, g1 in ranges]
        return offset, count, write_pos, spans

    def _send_full(self, pages: _PagePipeline, buf: bytearray, write_pos: int) -> int:
        """Send every whole ``max_write`` chunk at the front of ``buf``; the new write position."""
        max_write = self.settings.max_write
        while len(buf) >= max_write:
            pages.send(write_pos, bytes(memoryview(buf)[:max_write]))
            write_pos += max_write
            del buf[:max_write]
        return write_pos

    def _record(
        self, points: list[IndexPoint], batches: list[CommittedBatch], minutes: list[IndexPoint], now: int
    ) -> None:
        """Write the commit's index rows and batch ids in the background, off the append path.

        Safe because they are derived from the commit record: until the next commit replaces
        ``mv_batches`` (which first waits for this write) a crash loses nothing, and the next
        writer re-derives both from the log and the commit record.
        """
        state = self.state
        with_catalog = now - self._catalog_written_ms >= CATALOG_INTERVAL_MS
        if with_catalog:
            self._catalog_written_ms = now  # a summary: refreshed at most once per interval and on close

        def write() -> None:
            if with_catalog:
                self.index.record_commit(self.stream, state, points, batches, now, minutes)
            else:
                self.index.record_index(self.stream, points, batches, minutes)

        self._wait_recorded()
        self._recording = self._recorder.submit(write)

    def _wait_recorded(self) -> None:
        if self._recording is not None:
            pending, self._recording = self._recording, None
            pending.result()  # re-raises a failed write: the append fails; the next one recovers first

    def _write(self, pos: int, data: bytes, etag: str) -> str:
        end = pos + len(data)
        if end > self.state.blob_size:
            etag = self._grow(end, etag)
        self._keep_lease()
        return self.blob.write_pages(pos, data, self.lease, etag)

    def _grow(self, needed: int, etag: str) -> str:
        if needed > MAX_PAGE_BLOB_SIZE:
            raise StreamFull(
                f"stream {self.stream!r} would exceed the page blob maximum of {MAX_PAGE_BLOB_SIZE} bytes"
            )
        size = self.state.blob_size
        step = min(max(size, MIN_GROWTH), MAX_GROWTH)
        new_size = min(MAX_PAGE_BLOB_SIZE, _round_up(max(needed, size + step)))
        self._keep_lease()
        etag = self.blob.resize(new_size, self.lease, etag)
        self.state = replace(self.state, blob_size=new_size)
        return etag

    def _keep_lease(self, force: bool = False) -> None:
        """Renew the lease once a third of its duration has passed, so long appends keep it."""
        now = self.clock.monotonic()
        if force or now - self._renewed_at > self.settings.lease_seconds / 3:
            self.lease.renew()
            self._renewed_at = now


class _PagePipeline:
    """Page writes sent one at a time on a background thread, so that the writer encodes the
    next chunk while the previous one is on the wire. Still strictly sequential: each write is
    ``If-Match`` the ETag the previous one returned, and at most one is in flight."""

    def __init__(self, write: Callable[[int, bytes, str], str], etag: str, pool: ThreadPoolExecutor) -> None:
        self._write = write
        self._etag = etag
        self._pool = pool
        self._pending: Future[str] | None = None

    def send(self, pos: int, data: bytes) -> None:
        etag = self._pending.result() if self._pending else self._etag
        self._pending = self._pool.submit(self._write, pos, data, etag)

    def finish(self) -> str:
        if self._pending:
            self._etag, self._pending = self._pending.result(), None
        return self._etag

    def abandon(self) -> None:
        """After a failure: let the write in flight end (its bytes lie past ``committed``)."""
        if self._pending:
            self._pending.exception()
            self._pending = None


def _unit_runs(batches: list[Batch], codec: int, unit_bytes: int) -> Iterator[SealedUnit | Iterator[Field]]:
    """What a version 2 writer lays out for ``batches``, in order: a staged unit it copies as it
    is (stagedunits.copies_as_is), or a run of messages, across batch boundaries, that it packs
    into units of its own (a run ends only where a copied unit comes)."""
    run: list[Iterable[Field]] = []
    for batch in batches:
        if batch.units is None:
            run.append(_keyed(batch))
            continue
        for unit in batch.units.units:
            if copies_as_is(unit, codec, unit_bytes):
                if run:
                    yield chain.from_iterable(run)
                    run = []
                yield unit
            else:
                run.append(unit_fields(unit))
    if run:
        yield chain.from_iterable(run)


def _messages(batch: Batch) -> Iterable[NewMessage]:
    """The messages of ``batch`` for a version 1 writer: those of a batch staged as units too."""
    if batch.units is None:
        return batch.messages
    fields = chain.from_iterable(map(unit_fields, batch.units.units))
    return (NewMessage(value, key.decode("utf-8") if text else key) for key, text, value in fields)


def _keyed(batch: Batch) -> Iterator[Field]:
    """``(key bytes, key is text, value)`` of each message of ``batch``, in order."""
    if batch.encoded is not None:  # a claim-check body in version 1 records: take their fields
        return encoded_fields(batch.encoded)
    return message_fields(batch.messages)


def _duplicate(b: CommittedBatch) -> AppendResult:
    return AppendResult(
        b.batch_id, b.first_offset, b.next_offset, b.count, b.timestamp, duplicate=True, pieces=b.pieces
    )
