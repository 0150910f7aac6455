"""The items of a binary column, one ``bytes`` object each: what a reader makes of a version 2
unit's keys and values (and of a :class:`~vault_core.messagebatch.MessageBatch`'s) to build its
:class:`~vault_core.recordformat.Message` objects.

A column is Arrow's binary layout (docs/FORMAT.md §11.3): ``n + 1`` boundaries into one buffer,
item ``i`` the bytes from boundary ``i`` to boundary ``i + 1``. Python has no call that cuts one
buffer at many places, so the plain way costs a slice object and a call per item (~120 ns at
100 B). Where pyarrow 26 or later is installed (the ``arrow`` extra), Arrow wraps the same buffers
without a copy and ``to_pylist`` makes every item in one C++ loop (~60 ns an item, plus ~2 µs a
call): a unit's column of a few hundred or thousand items is cut two to six times faster, which
is most of what a per-message scan of 100 B events costs (BENCHMARKS.md, core_format). Earlier
pyarrow builds a scalar object per item there (~400 ns), slower than slicing, and its other fast
route, ``to_numpy``, imports pandas where it is installed (~50 MiB): with those, slicing it is.
The two ways return equal items; a column of a few items is sliced, which is faster below
``ARROW_MIN_ITEMS``.

Pure: bytes in, bytes out. pyarrow is imported on first use, never by ``import vault_core``
(with numpy, which it loads, ~40 MiB of a process's resident memory, once).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Iterable
from types import ModuleType

ARROW_MIN_ITEMS = 16
"""Fewer items than this are cut by slicing: Arrow's fixed cost per call (~2 µs) outweighs it."""

ARROW_MIN_VERSION = 26
"""The first pyarrow whose ``to_pylist`` builds binary items in C++ rather than a scalar each."""

USE_ARROW: bool | None = None
"""None: Arrow where pyarrow ``ARROW_MIN_VERSION`` or later imports; False: never (the tests run
both ways; a process may set it to keep pyarrow's libraries out of its memory)."""


@functools.cache
def _pyarrow() -> ModuleType | None:
    try:
        import pyarrow
    except ImportError:
        return None
    major = pyarrow.__version__.split(".", 1)[0]
    return pyarrow if major.isdigit() and int(major) >= ARROW_MIN_VERSION else None


def binary_items(data: bytes, ends: array[int], first: int, stop: int, start: int = 0) -> Iterable[bytes]:
    """``data[start + ends[i] : start + ends[i + 1]]`` for ``first <= i < stop``, as ``bytes``.

    ``ends`` are ``'I'`` boundaries relative to ``data[start]`` that never decrease and stay inside
    ``data`` (a reader checks them before: §11.5); they need not start at 0.
    """
    n = stop - first
    pa = _pyarrow() if USE_ARROW is not False and n >= ARROW_MIN_ITEMS else None
    if pa is None:
        if start:  # only the bytes up to the last wanted item: the boundaries count from ``start``
            data = data[start : start + ends[stop]]
        return map(data.__getitem__, map(slice, ends[first:stop], ends[first + 1 : stop + 1]))
    buffer = pa.py_buffer(data)
    column = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(ends), buffer.slice(start) if start else buffer], 0, first
    )
    # the boundaries are checked already, but Arrow trusts them with memory: check again (~1 ns an item)
    column.validate(full=True)
    return column.to_pylist()  # type: ignore[no-any-return]
