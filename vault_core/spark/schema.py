"""The one schema every Spark entry point returns, in Spark and in Arrow terms.

==========  =========  ========  ===================================================
column      Spark      nullable  meaning
==========  =========  ========  ===================================================
stream      STRING     no        the stream the record was read from
offset      BIGINT     no        byte offset of the record in its stream (its identity)
timestamp   TIMESTAMP  no        commit time of the record's batch, UTC (ms precision)
key         BINARY     no        the key bytes (empty when the producer gave none)
value       BINARY     no        the value bytes, exactly as written
key_text    STRING     yes       the key as text when the producer sent a text key, else null
==========  =========  ========  ===================================================

Spark's Python data source checks each Arrow batch against the schema it planned with
(``to_arrow_schema(schema, timezone="UTC")``), nullability included, so the Arrow schema
is derived from the Spark one here rather than written twice.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SPARK_SCHEMA = StructType(
    [
        StructField("stream", StringType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
        StructField("timestamp", TimestampType(), nullable=False),
        StructField("key", BinaryType(), nullable=False),
        StructField("value", BinaryType(), nullable=False),
        StructField("key_text", StringType(), nullable=True),
    ]
)

COLUMNS = tuple(f.name for f in SPARK_SCHEMA.fields)

_ARROW_TYPES: dict[type[DataType], pa.DataType] = {
    StringType: pa.string(),
    LongType: pa.int64(),
    TimestampType: pa.timestamp("us", tz="UTC"),
    BinaryType: pa.binary(),
}


def arrow_schema(schema: StructType = SPARK_SCHEMA) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (which must be ours, up to nullability)."""
    check_schema(schema)
    return pa.schema(
        [pa.field(f.name, _ARROW_TYPES[type(f.dataType)], nullable=f.nullable) for f in schema.fields]
    )


def check_schema(schema: StructType) -> None:
    """The source has a fixed schema: refuse a user-specified one that differs."""
    got = [(f.name, type(f.dataType)) for f in schema.fields]
    want = [(f.name, type(f.dataType)) for f in SPARK_SCHEMA.fields]
    if got != want:
        raise ValueError(
            f"messagevault has a fixed schema {SPARK_SCHEMA.simpleString()}; got {schema.simpleString()}"
        )


ARROW_SCHEMA = arrow_schema(SPARK_SCHEMA)
