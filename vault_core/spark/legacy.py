"""Reading streams on Spark without the Python data source API (Synapse Spark 3.4 / 3.5).

:func:`read_streams` plans on the driver exactly as the data source does and parallelises the
planned partitions, one per Spark partition, into an RDD. Each task then reads its partition:

- with pandas installed (Synapse has it; Spark needs it for ``mapInArrow``): the partition's
  Arrow batches go to the JVM as they are (``mapInArrow``, Spark >= 3.3);
- otherwise: ``mapPartitions`` turns the batches into row tuples, which Spark pickles
  (slower, but needs nothing beyond pyspark and pyarrow).

Either way the rows and the schema are those of ``format("messagevault")``. Nothing here
touches ``pyspark.sql.datasource``.
"""

from __future__ import annotations

import importlib.util
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypedDict

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, StructField, StructType

from vault_core.spark.options import ReadOptions, to_option_map
from vault_core.spark.partition_reader import read_partition
from vault_core.spark.plan import Partition, plan_read
from vault_core.spark.schema import SPARK_SCHEMA

Bound = int | str | datetime | Mapping[str, int | str]

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11 on

_SEED_SCHEMA = StructType([StructField("partition", BinaryType(), nullable=False)])


class ReadKeywords(TypedDict, total=False):
    """The options of a read as :func:`read_streams` keywords: each is the data source option of
    the same name in snake case (``from_offset`` is ``fromOffset``), and means what it means."""

    blob_url: str
    table_url: str
    sas: str
    table_sas: str
    access_token: str
    container: str
    table_prefix: str
    from_offset: Bound
    to_offset: Bound
    from_time: Bound
    to_time: Bound
    max_partition_bytes: int
    min_partitions: int
    skip_corrupt: bool
    corrupt_report_path: str


def read_streams(
    spark: SparkSession,
    connection_string: str | None = None,
    *,
    streams: Sequence[str] | str,
    arrow: bool | None = None,
    **options: Unpack[ReadKeywords],
) -> DataFrame:
    """The records of ``streams`` as a DataFrame with :data:`SPARK_SCHEMA`; the other arguments
    are :class:`ReadKeywords` (offsets/times may be per-stream dicts).

    ``arrow`` picks the transfer: ``mapInArrow`` (True), pickled rows (False) or, by default,
    ``mapInArrow`` when pandas is importable.
    """
    listed = [streams] if isinstance(streams, str) else list(streams)
    read = ReadOptions.parse(to_option_map(connection_string=connection_string, streams=listed, **options))
    return partitions_dataframe(spark, plan_read(read), arrow=arrow)


def partitions_dataframe(
    spark: SparkSession, partitions: Sequence[Partition], *, arrow: bool | None = None
) -> DataFrame:
    """A DataFrame reading ``partitions``, one Spark partition (task) each."""
    if not partitions:
        return spark.createDataFrame([], SPARK_SCHEMA)
    if arrow is None:
        arrow = importlib.util.find_spec("pandas") is not None
    if arrow:
        seeds = spark.sparkContext.parallelize([(pickle.dumps(p),) for p in partitions], len(partitions))
        return spark.createDataFrame(seeds, _SEED_SCHEMA).mapInArrow(_read_seeds, SPARK_SCHEMA)
    rows = spark.sparkContext.parallelize(list(partitions), len(partitions)).mapPartitions(_read_rows)
    return spark.createDataFrame(rows, SPARK_SCHEMA, verifySchema=False)


def _read_seeds(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # Runs in the tasks: each seed row is one pickled Partition.
    for batch in batches:
        for seed in batch.column(0).to_pylist():
            yield from read_partition(pickle.loads(seed))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _read_rows(partitions: Iterable[Partition]) -> Iterator[tuple[Any, ...]]:
    # Runs in the tasks. Timestamps become aware UTC datetimes, which Spark stores exactly.
    for part in partitions:
        for batch in read_partition(part):
            stream = part.stream
            micros = batch.column(2).cast(pa.int64())
            columns = (batch.column(1), micros, batch.column(3), batch.column(4), batch.column(5))
            for offset, us, key, value, key_text in zip(*(c.to_pylist() for c in columns), strict=True):
                yield stream, offset, _EPOCH + timedelta(microseconds=us), key, value, key_text
