"""Hypothesis's Unicode tables, built once by the controller while the xdist workers start.

The first strategy in a process that draws text (``st.text``, ``st.characters``, Schemathesis's
strings) has Hypothesis build two tables: the code points of each Unicode category, and those
UTF-8 can encode (it tries all 1.1 million): about 3.5 CPU-s. It keeps them on disk
(``.hypothesis/unicode_data/`` under the working directory, which the workers share), so a later
process only reads them. A fresh clone has none, and tests that draw text run on every worker,
so each worker built both.

The controller starts one process that builds them (:func:`start`) before anything else, while
the workers start and collect (several seconds before any test draws). A process, not a thread:
the controller's own thread would hold its interpreter's lock while the controller starts the
workers. Hypothesis writes each table whole or not at all (a temporary file renamed), so a
worker that gets there first builds its own, as it would without this.

The same process also reads the literal constants of the project's sources
(:func:`build_constants`): at its first example a process's Hypothesis parses every local module
it has imported (vault_core, vault_app, ...: about 140) for the constants it mixes into what it
draws, and keeps them in ``.hypothesis/constants/``, one file per source's hash; on a fresh clone
each worker parsed them all, about 0.6 CPU-s. Hypothesis writes those files whole too.

Of the two tables, the one of what UTF-8 can encode is the dear one (~3.3 CPU-s; the categories'
~0.2): the strategies' default alphabet names the codec, and Hypothesis finds its code points by
encoding and decoding each of the 1.1 million alone. So the builder finds that table first, a
block of code points at a time (:func:`codec_intervals`: the same answer for ~0.1 CPU-s), and
keeps it where Hypothesis reads it (:func:`write_codec_table`); then it draws its one string,
which builds the categories' table as before.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not imported by the builder's own process
    import pytest


def build() -> None:
    """Draw one string, through Hypothesis's public API: it builds and saves both tables."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=1, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.text(max_size=1))
    def draw_once(_text: str) -> None:
        pass

    draw_once()


CODEC = "utf-8"
"""The one codec the suite's strategies name: ``st.text()``'s and ``st.characters()``'s default
alphabets (and Schemathesis's strings, which use them)."""

Intervals = list[tuple[int, int]]


def codec_intervals(
    codec: str, start: int = 0, stop: int = sys.maxunicode + 1, block: int = 4096
) -> tuple[Intervals, Intervals]:
    """The code points in ``[start, stop)`` that ``codec`` encodes, and those of them that do not
    decode back to themselves, as merged inclusive intervals: what Hypothesis's
    ``intervals_from_codec`` finds one code point at a time, found here a block at a time. A block
    that encodes whole and decodes back whole is taken whole; only the code points of a block
    that does not (for UTF-8, the surrogates' blocks) are tried one at a time, as Hypothesis tries
    them. The same answer for a codec that encodes each code point apart from its neighbours, as
    UTF-8 does (a stateless codec, each code point a whole sequence)."""
    encodable: Intervals = []
    not_round_trip: Intervals = []

    def add(intervals: Intervals, low: int, high: int) -> None:
        if intervals and intervals[-1][1] == low - 1:
            intervals[-1] = (intervals[-1][0], high)
        else:
            intervals.append((low, high))

    for low in range(start, stop, block):
        high = min(low + block, stop) - 1
        chars = "".join(map(chr, range(low, high + 1)))
        try:
            whole = chars.encode(codec).decode(codec) == chars
        except Exception:  # as Hypothesis: usually, not always, a UnicodeError
            whole = False
        if whole:
            add(encodable, low, high)
            continue
        for point in range(low, high + 1):
            try:
                encoded = chr(point).encode(codec)
            except Exception:
                continue
            add(encodable, point, point)
            try:
                back = encoded.decode(codec) == chr(point)
            except Exception:
                back = False
            if not back:
                add(not_round_trip, point, point)
    return encodable, not_round_trip


def write_codec_table(codec: str, tables: tuple[Intervals, Intervals]) -> Path | None:
    """Keep ``tables`` (:func:`codec_intervals`) where and as Hypothesis keeps its own for
    ``codec``, whole or not at all; where it is, or None if that is not known. This is
    Hypothesis's private API: should it move, nothing is written and the first text a process
    draws has Hypothesis build the table itself, as without this; should the file's format
    change, Hypothesis would not read this one and builds its own as well."""
    try:
        from hypothesis.internal.charmap import charmap_file
    except ImportError:
        return None
    path = charmap_file(f"codec-v2-{codec}")
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}")
    with gzip.GzipFile(partial, "wb", mtime=1) as out:
        out.write(json.dumps([list(map(list, table)) for table in tables]).encode())
    partial.replace(path)
    return path


ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCES = frozenset({"tests", "node_modules", "build", "dist"})
"""Top-level directories whose modules Hypothesis does not read (the tests), or that hold none of
the project's (hidden ones too: .venv, .git)."""


def sources(root: Path = ROOT) -> list[Path]:
    """The project's Python files outside the tests: what a worker's Hypothesis reads constants from."""
    found = []
    for top in sorted(root.iterdir()):
        if top.name in NOT_SOURCES or top.name.startswith("."):
            continue
        if top.is_dir():
            found += sorted(top.rglob("*.py"))
        elif top.suffix == ".py":
            found.append(top)
    return found


def build_constants(paths: Iterable[Path]) -> int:
    """Have Hypothesis read and keep the constants of each local module at ``paths``, as a worker's
    would at its first example (its own function, given a module object that names the file); how
    many. This is Hypothesis's private API: should it move, nothing is read here and each worker
    reads the sources itself, as without this."""
    try:
        from hypothesis.internal.constants_ast import constants_from_module, is_local_module_file
    except ImportError:
        return 0
    read = 0
    for path in paths:
        if is_local_module_file(str(path)):
            module = types.ModuleType(path.stem)
            module.__file__ = str(path)
            constants_from_module(module)
            read += 1
    return read


def start(config: pytest.Config) -> None:
    """Build them in a process of this run's, waited for as the run ends (a run shorter than
    the build waits for it)."""
    quiet = subprocess.DEVNULL  # should it fail, each worker builds them as before
    builder = subprocess.Popen(
        [sys.executable, __file__], cwd=config.invocation_params.dir, stdout=quiet, stderr=quiet
    )

    def wait() -> None:
        builder.wait()

    config.add_cleanup(wait)


if __name__ == "__main__":
    build_constants(sources())  # needed at every worker's first example, the tables at its first text
    write_codec_table(CODEC, codec_intervals(CODEC))
    build()
