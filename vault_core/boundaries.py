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

In a version 2 unit (docs/FORMAT.md §11.6) the message offsets are the unit's position plus
0, 1, ..., count - 1: an offset inside a unit is proven by a walk that lands on the unit and
finds the offset below the unit's position plus its count. Decoding then starts at the unit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from vault_core.errors import InvalidOffset, UnsupportedVersion
from vault_core.index import IndexTables
from vault_core.prefix import UNIT_VERSION, VERSION_OFFSET
from vault_core.recordformat import FORMAT_VERSION, frame_at
from vault_core.unitformat import UNIT_HEADER_SIZE

PROOF_CHUNK = 4 * 1024 * 1024
"""Bytes read per request while walking towards an offset."""
REMEMBERED_PER_STREAM = 4096
REMEMBERED_STREAMS = 1024

Read = Callable[[int, int], bytes]
"""``read(start, length)``: committed bytes of the stream."""


_UNCHECKED = -1
"""What a walk from an index point answers when no frame sits where the point says."""


def frame_sits_at(position: int, read: Read, committed: int) -> bool:
    """Whether the header of a frame of a version this reader knows is at ``position``, before
    ``committed``, and names it (magic, version and its own offset): what the index's word for a
    position is checked by before it is used (FORMAT.md §7.3, §8). Reads nothing at or past
    ``committed``."""
    header = read(position, min(UNIT_HEADER_SIZE, committed - position))
    frame = frame_at(header, 0)
    return (
        frame is not None
        and frame.magic_ok
        and header[VERSION_OFFSET] in (FORMAT_VERSION, UNIT_VERSION)
        and frame.offset == position
    )


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
        self._known: OrderedDict[str, OrderedDict[int, int]] = OrderedDict()
        """Per stream: proven offset -> where decoding it starts (itself, or its unit's position)."""
        self._lock = threading.Lock()

    def learn(self, stream: str, offsets: Iterable[int], *, unit: int | None = None) -> None:
        """Remember offsets a walk from a proven boundary reached (a read's ``next_offset``);
        ``unit``: they are messages inside the version 2 unit at that position."""
        with self._lock:
            known = self._known.get(stream)
            if known is None:
                known = self._known[stream] = OrderedDict()
                if len(self._known) > REMEMBERED_STREAMS:
                    self._known.popitem(last=False)
            self._known.move_to_end(stream)
            for offset in offsets:
                known[offset] = offset if unit is None else unit
                known.move_to_end(offset)
            while len(known) > REMEMBERED_PER_STREAM:
                known.popitem(last=False)

    def prove(self, stream: str, offset: int, committed: int, read: Read) -> int:
        """Where decoding ``offset`` starts, if it is a message's offset in the committed log (itself,
        or the position of the version 2 unit that holds it); else raise InvalidOffset."""
        if boundary_by_definition(stream, offset, committed):
            return offset
        known = self._known_start(stream, offset)
        if known is not None:
            return known
        start, from_index = self._start_below(stream, offset)
        # An index point is checked by its header before its word is taken (the offset itself,
        # which needs no walk, or the walk's first frame): a point with no frame of a known
        # version there is the index's mistake, and the index is not relied on for correctness
        # (FORMAT.md §8), so the proof walks from the start of the log instead.
        if start == offset and from_index and not frame_sits_at(start, read, committed):
            start, from_index = 0, False
        unit = self._walk(stream, start, offset, committed, read, check_first=from_index)
        if unit is _UNCHECKED:
            unit = self._walk(stream, 0, offset, committed, read)
        if unit is None:
            raise InvalidOffset(f"offset {offset} is not the start of a record in stream {stream!r}")
        self.learn(stream, [offset], unit=unit if unit != offset else None)
        return unit

    def known_start(self, stream: str, offset: int) -> int | None:
        """Where decoding ``offset`` starts, if this process proved it before; else None."""
        return self._known_start(stream, offset)

    def _known_start(self, stream: str, offset: int) -> int | None:
        with self._lock:
            known = self._known.get(stream)
            return known.get(offset) if known is not None else None

    def _start_below(self, stream: str, offset: int) -> tuple[int, bool]:
        """The closest proven boundary at or before ``offset``, a remembered one or an index
        point, and whether it is the index point (whose header nothing has checked yet)."""
        with self._lock:
            known = self._known.get(stream)
            best = max((start for o, start in known.items() if o <= offset), default=0) if known else 0
        point = self.index.point_at_or_before(stream, offset) if self.index else None
        # a row's key says where its point is, its Offset property what the walk uses: a row
        # whose Offset lies past the offset is wrong (the index is not relied on, FORMAT.md §8)
        if point is not None and best < point.offset <= offset:
            return point.offset, True
        return best, False

    @staticmethod
    def _walk(
        stream: str, start: int, target: int, committed: int, read: Read, *, check_first: bool = False
    ) -> int | None:
        """Walk record and unit lengths from the boundary ``start`` towards ``target`` (below
        ``committed``): the position of the record or unit that holds the message at ``target``,
        or None if none does. Reads nothing at or past ``committed``, which does not exist for a
        reader (FORMAT.md §7.2), so a header that it cuts off proves nothing.

        ``check_first``: ``start`` is an index point, not yet checked by its header; if no frame
        of a known version sits there (magic, version, its own offset), :data:`_UNCHECKED`."""
        pos = start
        while pos < target:
            data = read(pos, min(PROOF_CHUNK, target - pos + UNIT_HEADER_SIZE, committed - pos))
            at = 0
            while pos < target:
                frame = frame_at(data, at)
                if frame is None:
                    if check_first and pos == start:
                        return _UNCHECKED  # the index point's header is cut off by the end
                    if at == 0:
                        # Not even one header in a whole read: the committed end cuts it off,
                        # where only a damaged length can have led the walk (and reading again
                        # from here would return the same bytes for ever).
                        return None
                    break  # the next header is in the next chunk
                version = data[at + VERSION_OFFSET]
                if check_first and pos == start:
                    known = version in (FORMAT_VERSION, UNIT_VERSION)
                    if not (frame.magic_ok and known and frame.offset == pos):
                        return _UNCHECKED  # not a frame where the index said: not the log's fault
                if not frame.magic_ok:
                    return None  # not the log the writer laid out (corrupt): prove nothing
                if version not in (FORMAT_VERSION, UNIT_VERSION):
                    # a newer writer's frame, whose length this reader cannot know (FORMAT.md §9)
                    raise UnsupportedVersion(
                        f"record format version {version} is not supported by this reader",
                        stream=stream,
                        offset=pos,
                    )
                if frame.offset != pos or frame.length <= frame.size:  # a unit is longer than its count
                    return None
                if pos < target < pos + frame.size:
                    return pos  # a message inside a version 2 unit
                at += frame.length
                pos += frame.length
            if not data:
                return None
        return pos if pos == target else None
