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
which the collector tracks for as long as it lives). Version 1 records are decoded by ``decode``
itself, into the list it has always made.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from vault_core.prefix import MAGIC, UNIT_VERSION, VERSION_OFFSET
from vault_core.recordformat import HEADER_SIZE, Message, decode, iter_unit_messages
from vault_core.unitformat import Unit, decode_unit


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


ScanPart = list[Message] | UnitPart
"""Version 1 records, decoded; or the wanted messages of a unit, to be built when taken."""


def decode_parts(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    start: int = 0,
    end: int | None = None,
    *,
    stream: str | None = None,
    complete: bool = False,
    first: int = 0,
) -> tuple[list[ScanPart], int]:
    """The whole records and units of ``buf[start:end]`` (``buf[0]`` is stream offset
    ``base_offset``) as parts, and the position after them; what ``decode`` takes and does.

    Messages before offset ``first`` are left out. A frame cut off by ``end`` is left for the
    caller, unless ``complete`` says ``end`` is the committed end, where it is corrupt; what does
    not verify raises what ``decode`` raises.
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    out: list[ScanPart] = []
    pos = start
    while pos < end:
        if (
            pos + HEADER_SIZE <= end
            and view[pos + VERSION_OFFSET] == UNIT_VERSION
            and view[pos : pos + 4] == MAGIC
        ):
            unit = decode_unit(view, pos, base_offset, end, stream=stream, complete=complete)
            if unit is None:
                break  # cut off by ``end``: the caller completes it
            skip = min(max(0, first - unit.offset), unit.size)
            if skip < unit.size:  # held until taken: without the payload, which keys and values copy
                out.append(UnitPart(unit._replace(payload=b""), skip, unit.size))
            pos += unit.length
            continue
        # ``buf`` itself, not the view: decode slices a key or value out of bytes in one copy
        records, after = decode(
            buf, base_offset, pos, end, stream=stream, complete=complete, first=first, stop_at_unit=True
        )
        if records:
            out.append(records)
        if after == pos:  # a record cut off by ``end``
            break
        pos = after
    return out, pos


def part_messages(part: ScanPart) -> Iterable[Message]:
    """The messages of a part: a unit's built as they are taken, version 1 records' as decoded."""
    if isinstance(part, UnitPart):
        return iter_unit_messages(*part)
    return part
