"""Example analysis: messages and bytes per key per hour, from a capture or straight from the vault.

::

    python -m vault_core.spark.analysis --parquet /data/capture
    python -m vault_core.spark.analysis --connection-string "$CONN" --streams orders --from-time 2025-01-01

``bytes`` counts value bytes. A key is shown as text when it was written as text, else as hex.
Hours are UTC, whatever the session time zone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

from vault_core.spark.capture import add_connection_args, connection_options, session
from vault_core.spark.legacy import partitions_dataframe
from vault_core.spark.options import ReadOptions, to_option_map
from vault_core.spark.plan import plan_read
from vault_core.spark.schema import SPARK_SCHEMA

CAPTURE_SCHEMA = StructType(
    [f for f in SPARK_SCHEMA.fields if f.name != "stream"]
    + [StructField("stream", StringType()), StructField("date", DateType())]
)
"""A capture's columns: the partition columns are typed explicitly (a stream named ``2024``
must stay a string; Spark would otherwise infer an integer from the directory name)."""


def read_capture(spark: SparkSession, path: str) -> DataFrame:
    """The Parquet files written by :mod:`vault_core.spark.capture` under ``path``."""
    return spark.read.schema(CAPTURE_SCHEMA).parquet(path)


def per_key_per_hour(df: DataFrame) -> DataFrame:
    """``stream, hour, key, messages, bytes`` for any DataFrame with the messagevault columns."""
    hour = F.expr("timestamp_micros(floor(unix_micros(`timestamp`) / 3600000000) * 3600000000)")
    key = F.coalesce(F.col("key_text"), F.concat(F.lit("0x"), F.lower(F.hex(F.col("key")))))
    return (
        df.select("stream", hour.alias("hour"), key.alias("key"), F.length("value").alias("value_bytes"))
        .groupBy("stream", "hour", "key")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("value_bytes").cast("long").alias("bytes"))
        .orderBy("stream", "hour", "key")
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m vault_core.spark.analysis", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--parquet", help="a capture directory (else read the vault directly)")
    add_connection_args(p)
    p.add_argument("--streams", help="comma-separated stream names (when reading the vault)")
    p.add_argument("--from-time", help="epoch ms or ISO-8601 (when reading the vault)")
    p.add_argument("--to-time", help="epoch ms or ISO-8601 (when reading the vault)")
    p.add_argument("--limit", type=int, default=100, help="rows to print")
    p.add_argument("--master", help="Spark master when not run by spark-submit")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spark = session("messagevault-analysis", args.master)
    if args.parquet:
        df = read_capture(spark, args.parquet)
    else:
        if not args.streams:
            raise SystemExit("give --parquet, or --streams with a connection")
        options = ReadOptions.parse(
            {
                **connection_options(args),
                **to_option_map(streams=args.streams, fromTime=args.from_time, toTime=args.to_time),
            }
        )
        df = partitions_dataframe(spark, plan_read(options))
    per_key_per_hour(df).show(args.limit, truncate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
