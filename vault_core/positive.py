"""One rule for positive numbers given as text: the app's settings, the local host's worker
counts and the Spark reader's options all parse theirs here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

N = TypeVar("N", int, float)


def positive(
    values: Mapping[str, str],
    name: str,
    default: N,
    parse: Callable[[str], N] = int,  # type: ignore[assignment]
    *,
    top: N | None = None,
    label: str | None = None,
) -> N:
    """``values[name]`` parsed by ``parse`` (``int``: a whole number), above 0, finite and at most
    ``top``; ``default`` when it is missing or empty. Anything else is a ValueError that names it
    (as ``label`` if given) and says what it must be."""
    raw = (values.get(name) or "").strip()
    if not raw:
        return default
    if parse is int:
        bound = f"a whole number from 1 to {top}" if top is not None else "a whole number of at least 1"
    else:
        bound = f"a number above 0 and at most {top}" if top is not None else "a finite number above 0"
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf") or (top is not None and value > top):  # NaN fails too
        raise ValueError(f"{label or name} must be {bound}, not {raw!r}")
    return value
