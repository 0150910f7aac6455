"""Capture: copy newly committed messages to Parquet, partitioned by stream and UTC date.

::

    python -m vault_core.spark.capture --streams orders,payments --out /data/capture
    spark-submit --py-files message_vault-0.1.0-py3-none-any.whl \\
        vault_core/spark/capture.py --streams orders,payments --out abfss://...   (docs/SPARK.md)

Layout under ``--out``::

    stream=<s>/date=<yyyy-mm-dd>/mv-<start:016x>-<end:016x>-<task>-<n>.parquet
    _progress/<s>/<captured offset:016x>.json       (see vault_core.spark.progress)
    _staging/                                       (one run's output before it is published)

A run, per stream: read its progress ``P`` (0 at first); delete data files whose range
starts at or after ``P`` (left by a run that crashed before saving progress); read the
committed length ``C``; copy ``[P, C)``. All streams are read in one Spark job into
``_staging``; each file is then moved to a name carrying its stream's offset range; only
then is the progress ``C`` saved. Every crash point therefore leaves either files that the
next run deletes and rewrites, or a saved progress with all its files: no row is written
twice and none is skipped. One capture job per ``--out`` at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from vault_core.spark.files import Files, files_for
from vault_core.spark.legacy import partitions_dataframe
from vault_core.spark.options import ReadOptions, to_option_map
from vault_core.spark.plan import Planner, StreamRange
from vault_core.spark.progress import Progress

_DATA_FILE = re.compile(r"^mv-([0-9a-f]{16})-([0-9a-f]{16})-\d+-c\d+\.parquet$")
_SPARK_FILE = re.compile(r"^part-(\d+)-.*?\.(c\d+)(\..+)?\.parquet$")


@dataclass(frozen=True)
class Captured:
    """What one run copied for one stream."""

    stream: str
    start: int
    end: int
    files: int


def utc_date(column: str) -> Column:
    """The UTC calendar date of a timestamp column, whatever the session time zone is (Spark >= 3.1)."""
    return F.expr(f"date_add(DATE'1970-01-01', CAST(floor(unix_micros(`{column}`) / 86400000000) AS INT))")


def capture(
    spark: SparkSession, options: ReadOptions, out: str, *, files: Files | None = None
) -> list[Captured]:
    """One capture run over ``options.streams`` into ``out``; returns what was added."""
    out = out.rstrip("/")
    fs = files or files_for(spark, out)
    progress = Progress(fs, out)
    planner = Planner(options.connection)
    ranges: list[StreamRange] = []
    for stream in options.streams:
        done = progress.committed(stream)
        _discard_unpublished(fs, out, stream, done)
        committed = planner.committed(stream, missing_ok=True)
        pending = StreamRange.since(stream, done, committed, "Capture it into a new --out.")
        if pending is not None:
            ranges.append(pending)
    if not ranges:
        return []
    staging = f"{out}/_staging"
    fs.delete(staging)
    df = partitions_dataframe(spark, planner.partitions(ranges, options))
    _write_staging(df, staging)
    moved = _publish(fs, staging, out, {r.stream: r for r in ranges})
    for r in ranges:
        progress.save(r.stream, r.end, start=r.start, files=moved.get(r.stream, 0))
    fs.delete(staging)
    return [Captured(r.stream, r.start, r.end, moved.get(r.stream, 0)) for r in ranges]


def _write_staging(df: DataFrame, staging: str) -> None:
    (
        df.withColumn("date", utc_date("timestamp"))
        .write.mode("overwrite")
        .partitionBy("stream", "date")
        .parquet(staging)
    )


def _publish(fs: Files, staging: str, out: str, ranges: dict[str, StreamRange]) -> dict[str, int]:
    """Move staged files to names that carry their stream's range; returns files per stream."""
    moved: dict[str, int] = {}
    for path in fs.list_files(staging):
        name = path.rsplit("/", 1)[-1]
        m = _SPARK_FILE.match(name)
        if not m:
            continue  # _SUCCESS, .crc checksums
        parts = dict(seg.split("=", 1) for seg in path.split("/")[-3:-1] if "=" in seg)
        r = ranges[parts["stream"]]
        dst = (
            f"{out}/stream={r.stream}/date={parts['date']}/"
            f"mv-{r.start:016x}-{r.end:016x}-{int(m.group(1)):05d}-{m.group(2)}.parquet"
        )
        fs.move(path, dst)
        moved[r.stream] = moved.get(r.stream, 0) + 1
    return moved


def _discard_unpublished(fs: Files, out: str, stream: str, done: int) -> None:
    """Delete files of ranges at or after the saved progress: a crashed run's, about to be redone."""
    for path in fs.glob(f"{out}/stream={stream}/date=*/mv-*.parquet"):
        m = _DATA_FILE.match(path.rsplit("/", 1)[-1])
        if m and int(m.group(1), 16) >= done:
            fs.delete(path)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m vault_core.spark.capture", description=(__doc__ or "").split("\n")[0]
    )
    add_connection_args(p)
    p.add_argument("--streams", required=True, help="comma-separated stream names")
    p.add_argument(
        "--out", required=True, help="output directory: a local path or a Hadoop URI (abfss://...)"
    )
    p.add_argument("--max-partition-bytes", type=int, help="bytes of log per Spark task (default 32 MiB)")
    p.add_argument("--skip-corrupt", action="store_true", help="skip records that fail their checksum")
    p.add_argument("--corrupt-report", help="directory for per-partition JSON reports of skipped records")
    p.add_argument("--master", help="Spark master when not run by spark-submit, e.g. local[2]")
    return p.parse_args(argv)


def add_connection_args(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument(
        "--connection-string",
        default=env("MESSAGEVAULT_CONNECTION_STRING"),
        help="storage connection string (default: $MESSAGEVAULT_CONNECTION_STRING)",
    )
    p.add_argument("--blob-url", help="blob endpoint, with --sas or DefaultAzureCredential")
    p.add_argument("--table-url", help="table endpoint (the index)")
    p.add_argument("--sas", default=env("MESSAGEVAULT_SAS"), help="SAS token (default: $MESSAGEVAULT_SAS)")
    p.add_argument("--container", help="blob container of the streams (default streams)")
    p.add_argument("--table-prefix", help="table name prefix (default mv)")


def connection_options(args: argparse.Namespace) -> dict[str, str]:
    return to_option_map(
        connectionString=args.connection_string,
        blobUrl=args.blob_url,
        tableUrl=args.table_url,
        sas=args.sas,
        container=args.container,
        tablePrefix=args.table_prefix,
    )


def session(app: str, master: str | None) -> SparkSession:
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    return builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options = ReadOptions.parse(
        {
            **connection_options(args),
            **to_option_map(
                streams=args.streams,
                maxPartitionBytes=args.max_partition_bytes,
                skipCorrupt=args.skip_corrupt or None,
                corruptReportPath=args.corrupt_report,
            ),
        }
    )
    spark = session("messagevault-capture", args.master)
    results = capture(spark, options, args.out)
    for r in results:
        print(json.dumps({"stream": r.stream, "from": r.start, "to": r.end, "files": r.files}))
    if not results:
        print(json.dumps({"captured": 0, "note": "nothing new"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
