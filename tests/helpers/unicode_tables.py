"""Hypothesis's Unicode tables, built once by the controller while the xdist workers start.

The first strategy in a process that draws text (``st.text``, ``st.characters``, Schemathesis's
strings) has Hypothesis build two tables: the code points of each Unicode category, and those
UTF-8 can encode (it tries all 1.1 million): about 2 CPU-s. It keeps them on disk
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
"""

from __future__ import annotations

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
    build()
