"""What the per-message scan makes of a buffer before it hands the messages on. Pure: bytes in,
parts out.

:func:`decode_parts` checks every frame of a buffer as :func:`~vault_core.recordformat.decode`
does, and raises what it raises, before any message of the buffer is handed on. It leaves each
version 2 unit as a :class:`UnitPart` (the verified, decompressed unit and which of its messages
are wanted), whose :class:`~vault_core.recordformat.Message` objects :func:`part_messages` builds
one at a time as the scan's consumer takes them. So a scan builds no list of a unit's messages,
let alone of a whole read's (a 4 MiB read of 100 B events is 100,000 of them): a list that
large costs about twice as much per message as the messages themselves, in allocation far from
the cache and in the cyclic collector's passes over the heap (a ``Message`` is a tuple subclass,
which the collector tracks for as long as it lives). Version 1 records are held the same way, as a
:class:`RecordsPart`: the read's bytes and where each checked record's key and value lie in them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import NamedTuple

from vault_core.errors import FormatError
from vault_core.recordformat import (
    HEADER_SIZE,
    Message,
    RecordRun,
    check_records,
    is_unit_at,
    iter_unit_messages,
    raise_record_error,
    record_messages,
)
from vault_core.span import Span
from vault_core.unitformat import Unit, decode_unit, unit_length_at


class UnitPart(NamedTuple):
    """Messages ``first`` to ``stop`` (indexes in the unit, ``first < stop``) of a verified unit."""

    unit: Unit
    first: int
    stop: int

    def before(self, end: int) -> UnitPart | None:
        """Its messages that start before stream offset ``end`` (None if none do)."""
        stop = min(self.stop, end - self.unit.offset)
        if stop <= self.first:
            return None
        return self if stop == self.stop else self._replace(stop=stop)


class RecordsPart(NamedTuple):
    """Consecutive version 1 records of one read that passed every check of ``decode``, where
    :func:`~vault_core.recordformat.check_records` found them in ``buf`` (stream offset ``base``)."""

    buf: bytes
    base: int
    run: RecordRun

    def before(self, end: int) -> RecordsPart | None:
        """Its records that start before stream offset ``end`` (None if none do)."""
        n = bisect.bisect_left(self.run.key_starts, end - self.base + HEADER_SIZE)
        if n == 0:
            return None
        if n == len(self.run.key_starts):
            return self
        return self._replace(run=RecordRun(*(column[:n] for column in self.run)))

    def messages(self) -> Iterator[Message]:
        """Its records as :class:`Message`, each built as it is taken (``map`` and ``zip`` in C)."""
        return record_messages(self.buf, self.base, self.run)


ScanPart = RecordsPart | UnitPart
"""Version 1 records, checked; or the wanted messages of a unit: each built when taken."""


def decode_parts(span: Span, *, pool: Executor | None = None) -> tuple[list[ScanPart], int]:
    """The whole records and units of ``span`` as parts, and the position after them; what
    :func:`~vault_core.recordformat.decode` takes and does.

    Messages before offset ``span.first`` are left out. A frame cut off by ``span.end`` is left
    for the caller, unless ``span.complete`` says it is the committed end, where it is corrupt;
    what does not verify raises what ``decode`` raises: the first damage in the buffer, whatever
    else follows.

    With a ``pool``, the buffer's units are checked and decompressed on its threads, side by side
    (``zlib.crc32`` and zstd release the GIL), while this thread walks the buffer's frames by their
    headers; it returns once every one is done, so still nothing of a damaged buffer is returned.
    """
    buf, base_offset, pos, end, _, _, first = span
    view = memoryview(buf)
    data = buf if isinstance(buf, bytes) else bytes(buf)  # what version 1 keys and values are sliced from
    out: list[ScanPart | Future[UnitPart | None]] = []
    try:
        while pos < end:
            if is_unit_at(view, pos, end):
                claimed = unit_length_at(view, pos)
                if pool is not None and claimed is not None and pos + claimed[0] <= end:
                    # Whole by its header: decoded on the pool. A header that lies fails there, and
                    # that error is raised before any this walk meets after it (see _resolved).
                    out.append(pool.submit(_unit_part, span, pos))
                    pos += claimed[0]
                    continue
                unit = decode_unit(span, pos)
                if unit is None:
                    break  # cut off by ``end``: the caller completes it
                part = _wanted(unit, first)
                if part is not None:
                    out.append(part)
                pos += unit.length
                continue
            run, after = check_records(view, base_offset, pos, end, first)
            if run.key_starts:
                out.append(RecordsPart(data, base_offset, run))
            if after == pos:  # not a record that checks: why, or that it is cut off by ``end``
                raise_record_error(span, pos)
                break
            pos = after
    except FormatError:
        _resolved(out)  # damage before this one, found on the pool, is the first: it is raised instead
        raise
    return _resolved(out), pos


def _unit_part(span: Span, pos: int) -> UnitPart | None:
    """:func:`_wanted` of the unit at ``span.buf[pos]``, which lies whole before ``span.end`` by its
    header; raises what :func:`~vault_core.unitformat.decode_unit` raises."""
    unit = decode_unit(span, pos)
    assert unit is not None  # its header puts its end before ``end``
    return _wanted(unit, span.first)


def _wanted(unit: Unit, first: int) -> UnitPart | None:
    """The messages of a verified unit from offset ``first`` on (None if none)."""
    skip = min(max(0, first - unit.offset), unit.size)
    if skip == unit.size:
        return None
    # held until taken: without the payload, which keys and values copy
    return UnitPart(unit._replace(payload=b""), skip, unit.size)


def _resolved(out: list[ScanPart | Future[UnitPart | None]]) -> list[ScanPart]:
    """The parts, each unit's once its thread is done, in buffer order: the first to have failed
    raises its error (the later ones are cancelled)."""
    parts: list[ScanPart] = []
    try:
        for item in out:
            part = item.result() if isinstance(item, Future) else item
            if part is not None:
                parts.append(part)
    except BaseException:
        for item in out:
            if isinstance(item, Future):
                item.cancel()
        raise
    return parts


def part_messages(part: ScanPart) -> Iterable[Message]:
    """The messages of a part: a unit's built as they are taken, version 1 records' as decoded."""
    if isinstance(part, UnitPart):
        return iter_unit_messages(*part)
    return part.messages()
