"""Proving that an offset is a record boundary the writer produced (docs/FORMAT.md §7.3).

A record is self-describing (sync marker, its own offset, a checksum), so it is tempting to
accept any offset whose bytes parse as a record. That is not proof: a producer chooses the
bytes of its values, and a value can hold a complete, valid record that names its own offset.
Reading from inside that value would present a message nobody produced.

So a reader starts only at a **proven** boundary: 0, the committed end, an index point (the
writer records them from its own layout), or an offset reached by walking record lengths
forward from a proven boundary. :class:`Boundaries` does that walk, from the nearest index
point at or before the offset (at most about two index spacings of log), and remembers what
it proved, so a sequential reader (whose next offset was proven by its last read) pays nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from vault_core.errors import InvalidOffset
from vault_core.index import IndexTables
from vault_core.recordformat import HEADER, HEADER_SIZE, MAGIC

PROOF_CHUNK = 4 * 1024 * 1024
"""Bytes read per request while walking towards an offset."""
REMEMBERED_PER_STREAM = 4096
REMEMBERED_STREAMS = 1024

Read = Callable[[int, int], bytes]
"""``read(start, length)``: committed bytes of the stream."""


def boundary_by_definition(stream: str, offset: int, committed: int) -> bool:
    """Whether ``offset`` is a boundary with no proof needed (0 or the committed end).

    Raises InvalidOffset outside ``[0, committed]``. Otherwise False means it must be proven: by
    :meth:`Boundaries.prove`, or by asking a server that does (``vault_client.rawlog``).
    """
    if offset in (0, committed):
        return True
    if not 0 < offset < committed:
        raise InvalidOffset(f"offset {offset} is outside the committed part of {stream!r} (0-{committed})")
    return False


class Boundaries:
    """Proven boundaries of every stream one process reads; safe to share between threads."""

    def __init__(self, index: IndexTables | None) -> None:
        self.index = index
        self._known: OrderedDict[str, OrderedDict[int, None]] = OrderedDict()
        self._lock = threading.Lock()

    def learn(self, stream: str, offsets: Iterable[int]) -> None:
        """Remember offsets a walk from a proven boundary reached (a read's ``next_offset``)."""
        with self._lock:
            known = self._known.get(stream)
            if known is None:
                known = self._known[stream] = OrderedDict()
                if len(self._known) > REMEMBERED_STREAMS:
                    self._known.popitem(last=False)
            self._known.move_to_end(stream)
            for offset in offsets:
                known[offset] = None
                known.move_to_end(offset)
            while len(known) > REMEMBERED_PER_STREAM:
                known.popitem(last=False)

    def prove(self, stream: str, offset: int, committed: int, read: Read) -> None:
        """Return if ``offset`` is a boundary of the committed log, else raise InvalidOffset."""
        if boundary_by_definition(stream, offset, committed) or self._is_known(stream, offset):
            return
        start = self._start_below(stream, offset)
        if not self._walk(stream, start, offset, read):
            raise InvalidOffset(f"offset {offset} is not the start of a record in stream {stream!r}")
        self.learn(stream, [offset])

    def _is_known(self, stream: str, offset: int) -> bool:
        with self._lock:
            known = self._known.get(stream)
            return known is not None and offset in known

    def _start_below(self, stream: str, offset: int) -> int:
        """The closest proven boundary at or before ``offset``: a remembered one or an index point."""
        with self._lock:
            known = self._known.get(stream)
            best = max((o for o in known if o <= offset), default=0) if known else 0
        point = self.index.point_at_or_before(stream, offset) if self.index else None
        return max(best, point.offset if point else 0)

    @staticmethod
    def _walk(stream: str, start: int, target: int, read: Read) -> bool:
        """Walk record lengths from the boundary ``start``: does the walk land on ``target``?"""
        pos = start
        while pos < target:
            data = read(pos, min(PROOF_CHUNK, target - pos + HEADER_SIZE))
            at = 0
            while pos < target:
                if at + HEADER_SIZE > len(data):
                    break  # the next header is in the next chunk
                magic, _, _, _, klen, vlen, claimed, _ = HEADER.unpack_from(data, at)
                if magic != MAGIC or claimed != pos:
                    return False  # not the log the writer laid out (corrupt): prove nothing
                length = HEADER_SIZE + klen + vlen
                at += length
                pos += length
            if not data:
                return False
        return pos == target
