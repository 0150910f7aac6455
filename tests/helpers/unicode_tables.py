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
"""

from __future__ import annotations

import subprocess
import sys
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
    build()
