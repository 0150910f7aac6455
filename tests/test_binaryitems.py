"""A binary column's items (vault_core.binaryitems) are the same whether Arrow cuts them or slicing
does, and so are the messages every read path builds from them; Arrow never reads outside the
buffers it is given.

The suite's environment has pyarrow and numpy (the arrow extra), so every other test reads through
Arrow where a column has enough items; these run the plain way beside it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_core import binaryitems, codecs
from vault_core.binaryitems import ARROW_MIN_ITEMS, binary_items
from vault_core.clock import ManualClock
from vault_core.memory import MemoryAccount
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

STREAM = "items"
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(params=[None, False], ids=["arrow", "slicing"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool | None]:
    monkeypatch.setattr(binaryitems, "USE_ARROW", request.param)
    yield request.param


def column(items: list[bytes], prefix: bytes) -> tuple[bytes, array[int]]:
    ends = array("I", [0])
    for item in items:
        ends.append(ends[-1] + len(item))
    return prefix + b"".join(items) + b"tail", ends


def test_the_environment_has_arrow() -> None:
    assert binaryitems._pyarrow() is not None  # else the arrow cases below test slicing twice


@FAST
@given(
    items=st.lists(st.binary(max_size=40) | st.just(b""), max_size=3 * ARROW_MIN_ITEMS),
    prefix=st.binary(max_size=9),
    data=st.data(),
)
@pytest.mark.parametrize("use_arrow", [None, False])
def test_the_items_are_the_slices_of_the_buffer_either_way(
    items: list[bytes], prefix: bytes, data: st.DataObject, use_arrow: bool | None
) -> None:
    buffer, ends = column(items, prefix)
    first = data.draw(st.integers(0, len(items)))
    stop = data.draw(st.integers(first, len(items)))
    binaryitems.USE_ARROW = use_arrow
    try:
        got = list(binary_items(buffer, ends, first, stop, len(prefix)))
    finally:
        binaryitems.USE_ARROW = None
    assert got == items[first:stop]
    assert all(type(item) is bytes for item in got)


def test_boundaries_that_do_not_start_at_zero_are_cut_alike(way: bool | None) -> None:
    items = [b"%d" % i for i in range(3 * ARROW_MIN_ITEMS)]
    buffer, ends = column(items, b"")
    shifted = array("I", (e + 5 for e in ends))
    assert list(binary_items(b"12345" + buffer, shifted, 2, len(items))) == items[2:]


def test_arrow_refuses_boundaries_outside_its_buffer() -> None:
    """The readers check boundaries before they cut (§11.5); if one ever did not, Arrow would read
    past the buffer: it is asked to check them itself, and refuses."""
    ends = array("I", range(0, 10 * (ARROW_MIN_ITEMS + 1), 10))
    with pytest.raises(ValueError):
        list(binary_items(b"x" * 20, ends, 0, ARROW_MIN_ITEMS))
    falling = array("I", [0, 5, 3, *range(10, 10 + ARROW_MIN_ITEMS)])
    with pytest.raises(ValueError):
        list(binary_items(b"x" * 100, falling, 0, ARROW_MIN_ITEMS))


def written() -> Vault:
    """A stream of format 1 records and version 2 units of every codec, units short and long."""
    clock = ManualClock(1_750_000_000_000)
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    settings_ = [WriterSettings(record_format=1)] + [
        WriterSettings(record_format=2, codec=c) for c in sorted(codecs.CODEC_NAMES)
    ]
    for n, s in enumerate(settings_):
        with vault.writer(STREAM, s) as w:
            for size in (1, ARROW_MIN_ITEMS - 1, ARROW_MIN_ITEMS, 500):
                keys: list[str | bytes] = [f"k{i}" if i % 3 else b"\x00\xff" for i in range(size)]
                w.append([Batch([NewMessage(b"v%d-%d" % (n, i) * (i % 7), k) for i, k in enumerate(keys)])])
        clock.advance(1_000)
    return vault


def test_every_read_path_builds_the_same_messages_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    vault = written()
    reader = vault.reader

    def everything() -> tuple[object, ...]:
        scanned = list(reader.scan(STREAM))
        batches = [m for b in reader.scan_batches(STREAM) for m in b.messages()]
        middle = scanned[len(scanned) // 2].offset
        page = reader.read(STREAM, middle, max_count=300)
        part = list(reader.scan(STREAM, scanned[3].offset, scanned[-3].offset))
        return scanned, batches, page.messages, page.next_offset, part

    by_arrow = everything()
    monkeypatch.setattr(binaryitems, "USE_ARROW", False)
    by_slicing = everything()
    assert by_arrow == by_slicing
    scanned = by_arrow[0]
    assert isinstance(scanned, list) and len(scanned) == 4 * (1 + ARROW_MIN_ITEMS - 1 + ARROW_MIN_ITEMS + 500)
    assert by_arrow[1] == scanned
