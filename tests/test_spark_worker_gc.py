"""vault_core.spark.worker_gc: PySpark's daemon workers freeze their imported objects once."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator

import pytest

from vault_core.spark import worker_gc


@pytest.fixture
def daemon_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """This process dressed as a worker forked by ``python -m pyspark.daemon``, unfrozen after (and
    frozen again if it was: conftest freezes what a pytest worker collected); the collections
    asked for are counted, not run (one here would finalise what earlier tests left, whose
    warnings would land on this test)."""
    collections: list[int] = []
    was_frozen = gc.get_freeze_count() > 0

    def collect(generation: int = 2) -> int:
        collections.append(generation)
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="pyspark.daemon")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(worker_gc, "_frozen_in", None)
    try:
        yield collections
    finally:
        gc.unfreeze()
        if was_frozen:
            gc.freeze()


def test_outside_a_daemon_worker_nothing_is_frozen() -> None:
    before = gc.get_freeze_count()
    assert worker_gc.freeze_imported_objects() is False
    assert gc.get_freeze_count() == before


def test_a_daemon_worker_collects_then_freezes_its_objects_once(daemon_worker: list[int]) -> None:
    assert worker_gc.freeze_imported_objects() is True
    assert daemon_worker == [2]  # a full collection before the freeze: no garbage frozen
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # the modules this process imported
    assert worker_gc.freeze_imported_objects() is False  # the next task's call: nothing to do
    # not frozen again: a second freeze would add what was allocated since (the count can only
    # fall, as frozen objects die by reference counting, here or in the process's other threads)
    assert gc.get_freeze_count() <= frozen and daemon_worker == [2]
