"""Spark's wrapper around a planned partition, shared by batch reads (:mod:`.datasource`) and
Structured Streaming (:mod:`.streaming`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

if TYPE_CHECKING:  # not imported at run time: a planner that only asks for the schema skips the SDK
    from vault_core.spark.plan import Partition


class VaultInputPartition(InputPartition):
    """Spark's wrapper around a planned :class:`Partition` (pickled to the executor)."""

    def __init__(self, part: Partition) -> None:
        super().__init__(part)
        self.part = part
