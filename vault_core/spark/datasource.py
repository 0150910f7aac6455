"""The Spark 4 Python data source ``messagevault`` (batch reads; streaming in :mod:`.streaming`).

::

    from vault_core.spark import register
    register(spark)
    df = (spark.read.format("messagevault")
          .option("connectionString", conn).option("streams", "orders,payments")
          .option("fromTime", "2025-01-01T00:00:00Z").load())

Planning (:mod:`.plan`) runs once in the driver's planner process; each partition is read
by one task (:mod:`.partition_reader`), which yields Arrow batches in exactly the Arrow
schema Spark derives from :data:`~vault_core.spark.schema.SPARK_SCHEMA`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
except ImportError as exc:  # pragma: no cover - depends on the installed Spark
    raise ImportError(
        "format('messagevault') needs Spark 4 (pyspark.sql.datasource); "
        "on Spark 3.x use vault_core.spark.read_streams"
    ) from exc

from vault_core.spark.input_partition import VaultInputPartition
from vault_core.spark.schema import SPARK_SCHEMA, arrow_schema
from vault_core.spark.worker_gc import freeze_imported_objects

if TYPE_CHECKING:
    from vault_core.spark.options import ReadOptions

# Spark starts a Python process for each planning step: the one asking for the schema needs
# neither the Azure SDK nor the decoder, the one planning partitions not the decoder. So the
# options, the planner and the partition reader are imported where they are used.


class MessageVaultDataSource(DataSource):
    """``spark.read.format("messagevault")`` and ``spark.readStream.format("messagevault")``."""

    @classmethod
    def name(cls) -> str:
        return "messagevault"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from vault_core.spark.options import ReadOptions

        return VaultBatchReader(ReadOptions.parse(self.options), arrow_schema(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from vault_core.spark.options import ReadOptions
        from vault_core.spark.streaming import VaultStreamReader

        return VaultStreamReader(ReadOptions.parse(self.options), arrow_schema(schema))


class VaultBatchReader(DataSourceReader):
    """Plans partitions on the driver; ``read`` runs in the tasks. Holds no SDK clients (it is pickled)."""

    def __init__(self, options: ReadOptions, schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        from vault_core.spark.plan import plan_read

        freeze_imported_objects()  # the planning call's worker is reused and collected too
        return [VaultInputPartition(p) for p in plan_read(self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, VaultInputPartition):
            return iter(())  # Spark substitutes InputPartition(None) when nothing was planned
        from vault_core.spark.partition_reader import read_partition

        return read_partition(partition.part, self.arrow_schema)


def register(spark: SparkSession) -> None:
    """Make ``format("messagevault")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(MessageVaultDataSource)
