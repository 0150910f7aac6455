"""What a decoder of log bytes is given: a :class:`Span` of a buffer and where it lies in the stream.

Every decoder (records and units as messages, as batches, as scan parts; one unit) takes one, so
the bytes, their place in the stream, the bounds and what to do at the end travel as one value,
spelt once here, instead of as the same seven arguments through every call.
"""

from __future__ import annotations

from typing import NamedTuple


class Span(NamedTuple):
    """``buf[start:end]`` to decode, where ``buf[0]`` is stream offset ``base``."""

    buf: bytes | bytearray | memoryview
    base: int
    start: int
    end: int
    """Where decoding stops: a frame cut off here is left for the caller to complete with more
    bytes, unless ``complete`` says this is the committed end, where a cut-off frame is corrupt."""
    stream: str | None = None
    """The stream's name, for errors."""
    complete: bool = False
    first: int = 0
    """Messages before this stream offset are left out (a read that starts inside a unit)."""
