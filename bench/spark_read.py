"""Spark read benchmark (issue 4): the messagevault data source against the bytes it reads.

    ./dev bench spark_read      (python -m bench.spark_read; SPARK_LOCAL_IP=127.0.0.1 is set for you)

One in-memory Azurite, one stream of 1,000,000 messages with 100-byte values (100 keys), one
local[2] Spark session. Every figure comes from the same run, so a noisy machine moves
both sides of each ratio alike. Each timing is the median of three runs after a warm-up.

  * download: the stream's committed bytes with plain ranged GETs (4 MiB each) from a thread
    pool as wide as Spark's reads are (2 tasks x 4 prefetched ranges = 8), no decoding
  * count / groupBy(key).count() through ``format("messagevault")``, and the ratio
    download time / Spark time (1.0 = Spark decodes as fast as the bytes arrive; target >= 0.7)
  * the same two queries over the same rows in a local Parquet file
  * the same count() from a Python data source that serves the same rows from memory (no I/O,
    no decoding): what Spark itself costs to take in 1M rows from Python, the floor for any
    Python data source on this machine
  * rows/s of count() through the Spark 4 data source vs ``read_streams`` (the older-Spark path)
  * CPU seconds per run, by process (Azurite, the Spark JVM, Python): on a small machine the
    ratio is bounded by CPU, not by the network, and these figures show where it goes
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from bench.common import MIB, median_of, report, timed
from bench.events import events
from vault_core.azure import StorageAccount
from vault_core.recordformat import NewMessage
from vault_core.spark.columnar import decode_pieces, record_batch
from vault_core.spark.options import ReadOptions
from vault_core.spark.plan import plan_read
from vault_core.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA
from vault_core.vault import Vault
from vault_core.writer import Batch
from vault_local.azurite import Azurite

MESSAGES = 1_000_000
VALUE = 100
KEYS = 100
PER_APPEND = 20_000
TASKS = 2
PREFETCH = 4  # vault_core.spark.options.DEFAULT_PREFETCH
CHUNK = 4 * MIB
RUNS = 3
FORMAT_ROUNDS = 5

try:
    import psutil
except ImportError:  # a dev dependency; without it the CPU figures are left out
    psutil = None


def write_stream(vault: Vault, stream: str) -> float:
    payload = b"v" * VALUE
    elapsed = 0.0
    # Format 1: a repeated payload would compress to almost nothing in format 2 (--format
    # measures format 2 on generated JSON events instead).
    with vault.writer(stream, record_format=1) as w:
        for first in range(0, MESSAGES, PER_APPEND):
            keys = (f"key-{i % KEYS:02d}" for i in range(first, first + PER_APPEND))
            batch = Batch([NewMessage(payload, key) for key in keys])
            elapsed += timed(partial(w.append, [batch]))
    return elapsed


def download_all(vault: Vault, stream: str, committed: int, threads: int = TASKS * PREFETCH) -> int:
    blob = vault.blob(stream)
    ranges = [(p, min(CHUNK, committed - p)) for p in range(0, committed, CHUNK)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(len(b) for b in pool.map(lambda r: blob.read(*r), ranges))


def cpu_by_process(azurite_pid: int) -> dict[str, float]:
    """CPU seconds so far of this process tree: Azurite, the Spark JVM, this driver, Python workers.

    A process that ended is counted in its parent's ``children_*`` times (Spark's daemons fork a
    Python worker per task or planning step that may not live to the next sample)."""
    if psutil is None:
        return {}
    me = psutil.Process()
    out: dict[str, float] = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            ended = t.children_user + t.children_system if p.pid != me.pid else 0.0
            role = (
                "azurite"
                if p.pid == azurite_pid
                else "driver"
                if p.pid == me.pid
                else "jvm"
                if p.name().startswith("java")
                else "python workers"
            )
        except psutil.Error:
            continue
        out[role] = out.get(role, 0.0) + t.user + t.system + ended
    return out


def measure(fn: Callable[[], object], azurite_pid: int) -> tuple[float, dict[str, float]]:
    """Median wall seconds of RUNS runs, and mean CPU seconds per run by process."""
    walls = []
    before = cpu_by_process(azurite_pid)
    for _ in range(RUNS):
        walls.append(timed(fn))
    after = cpu_by_process(azurite_pid)
    cpu = {k: round((after.get(k, 0.0) - before.get(k, 0.0)) / RUNS, 2) for k in after}
    return statistics.median(walls), cpu


def cpu_text(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items()) if v >= 0.01) or "n/a"


class InMemorySource(DataSource):
    """The benchmark's rows from memory, in as many partitions as the vault read: Spark's own cost."""

    @classmethod
    def name(cls) -> str:
        return "mv_bench_memory"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return InMemoryReader(int(self.options.get("partitions", "5")))


class InMemoryReader(DataSourceReader):
    def __init__(self, partitions: int) -> None:
        self.count = partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows, per = MESSAGES // self.count, 30_000
        keys = [f"key-{i % KEYS:02d}" for i in range(per)]
        template = pa.RecordBatch.from_arrays(
            [
                pa.repeat("bench-spark", per),
                pa.array(range(per), pa.int64()),
                pa.array([1_750_000_000_000_000] * per, pa.int64()).cast(
                    ARROW_SCHEMA.field("timestamp").type
                ),
                pa.array([k.encode() for k in keys], pa.binary()),
                pa.repeat(pa.scalar(b"v" * VALUE), per),
                pa.array(keys, pa.string()),
            ],
            schema=ARROW_SCHEMA,
        )
        for start in range(0, rows, per):
            yield template.slice(0, min(per, rows - start))


class CachedRowsSource(DataSource):
    """The rows of byte ranges of a saved log, decoded once per Python worker and then served
    from memory as the very Arrow batches the vault source yields for them, in the same
    partitions: Spark's own cost of taking those rows from a Python source, with no I/O and no
    decoding (the ceiling of any Python data source). ``empty``: the same partitions, no rows."""

    @classmethod
    def name(cls) -> str:
        return "mv_bench_cached"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        ranges = [tuple(int(x) for x in r.split("-")) for r in self.options["ranges"].split(",")]
        return CachedRowsReader(self.options["path"], ranges, self.options.get("empty") == "true")


_CACHED: dict[tuple[str, int, int], list[pa.RecordBatch]] = {}


class CachedRowsReader(DataSourceReader):
    def __init__(self, path: str, ranges: list[tuple[int, ...]], empty: bool) -> None:
        self.path, self.ranges, self.empty = path, ranges, empty

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.empty:
            return iter(())
        start, end = partition.value
        key = (self.path, start, end)
        if key not in _CACHED:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
            pieces = decode_pieces(data, start, last=True, stream=CACHED_STREAM)
            assert pieces.error is None and pieces.end == len(data)
            _CACHED[key] = [record_batch(CACHED_STREAM, p.arrays, p.rows, ARROW_SCHEMA) for p in pieces.parts]
        return iter(_CACHED[key])


CACHED_STREAM = "bench-format-v2"


def session() -> SparkSession:
    spark = (
        SparkSession.builder.master(f"local[{TASKS}]")
        .appName("bench-spark-read")
        .config("spark.sql.shuffle.partitions", str(TASKS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from vault_core.spark import register

    register(spark)
    spark.dataSource.register(InMemorySource)
    spark.dataSource.register(CachedRowsSource)
    return spark


def main() -> int:
    from vault_core.spark import read_streams

    load = os.getloadavg()[0]
    azurite = Azurite(in_memory=True).start()
    parquet_dir = tempfile.mkdtemp(prefix="mv-bench-parquet-")
    try:
        conn = azurite.connection_string
        vault = Vault(StorageAccount(connection_string=conn)).ensure()
        stream = "bench-spark"
        write_s = write_stream(vault, stream)
        committed = vault.blob(stream).state().committed
        spark = session()
        source = spark.read.format("messagevault").option("connectionString", conn).option("streams", stream)

        def vault_df(partition_bytes: int | None = None) -> DataFrame:
            opts = {"maxPartitionBytes": str(partition_bytes)} if partition_bytes else {}
            return source.options(**opts).load()

        # warm-up: Python workers, the JIT-free but import-heavy first task, Parquet copy
        assert vault_df().count() == MESSAGES
        vault_df().write.mode("overwrite").parquet(parquet_dir)
        parquet = spark.read.parquet(parquet_dir)
        assert download_all(vault, stream, committed) == committed

        partitions = len(vault_df().rdd.glom().map(len).collect())
        assert azurite.process is not None
        pid = azurite.process.pid
        download_s, download_cpu = measure(lambda: download_all(vault, stream, committed), pid)
        download_tasks_s = median_of(RUNS, lambda: download_all(vault, stream, committed, TASKS))
        count_s, count_cpu = measure(lambda: vault_df().count(), pid)
        count_8_s = median_of(RUNS, lambda: vault_df(8 * MIB).count())
        memory = spark.read.format("mv_bench_memory").option("partitions", str(partitions)).load()
        assert memory.count() == MESSAGES
        floor_s, floor_cpu = measure(lambda: memory.count(), pid)
        group_s = median_of(RUNS, lambda: vault_df().groupBy("key").count().collect())
        pq_count_s = median_of(RUNS, lambda: parquet.count())
        pq_group_s = median_of(RUNS, lambda: parquet.groupBy("key").count().collect())
        legacy_s = median_of(RUNS, lambda: read_streams(spark, conn, streams=[stream]).count())
        legacy_path = "mapInArrow" if _has_pandas() else "rows (no pandas)"

        mib = committed / MIB
        figures: dict[str, Any] = {
            "load average (1 min) at start": round(load, 2),
            "messages": MESSAGES,
            "stream MiB": round(mib, 1),
            "spark partitions (default 32 MiB)": partitions,
            "write s (StreamWriter, 20k/append)": round(write_s, 3),
            f"download s ({TASKS * PREFETCH} threads x 4 MiB GETs)": round(download_s, 3),
            "download MiB/s": round(mib / download_s, 1),
            "download CPU s/run": cpu_text(download_cpu),
            "spark count() s": round(count_s, 3),
            "spark count() MiB/s": round(mib / count_s, 1),
            "spark count() CPU s/run": cpu_text(count_cpu),
            "ratio count / download (target >= 0.7)": round(download_s / count_s, 3),
            f"download s ({TASKS} threads, one per Spark task)": round(download_tasks_s, 3),
            f"ratio count / {TASKS}-thread download": round(download_tasks_s / count_s, 3),
            "spark count() s, maxPartitionBytes 8 MiB": round(count_8_s, 3),
            "ratio count (8 MiB partitions) / download": round(download_s / count_8_s, 3),
            "memory source count() s (same rows, no I/O, no decode)": round(floor_s, 3),
            "memory source count() CPU s/run": cpu_text(floor_cpu),
            "ratio download / memory source (any Python source's limit)": round(download_s / floor_s, 3),
            "spark groupBy(key).count() s": round(group_s, 3),
            "ratio groupBy / download": round(download_s / group_s, 3),
            "parquet count() s": round(pq_count_s, 3),
            "parquet groupBy(key).count() s": round(pq_group_s, 3),
            "ratio groupBy parquet / vault": round(pq_group_s / group_s, 3),
            "rows/s spark 4 source (count)": round(MESSAGES / count_s),
            f"rows/s older-spark path, {legacy_path} (count)": round(MESSAGES / legacy_s),
            "ratio older path / spark 4 source": round(count_s / legacy_s, 3),
        }
        report("spark_read", "./dev bench spark_read", figures)
        spark.stop()
    finally:
        azurite.cleanup()
        import shutil

        shutil.rmtree(parquet_dir, ignore_errors=True)
    return 0


def _has_pandas() -> bool:
    import importlib.util

    return importlib.util.find_spec("pandas") is not None


def _count(df: DataFrame) -> int:
    return df.count()


def _group_count(df: DataFrame) -> object:
    return df.groupBy("key").count().collect()


def format_main(messages: int) -> int:
    """Format 2 against format 1 through Spark, on the same ~100 B JSON events (results:
    spark_read_format): count() and groupBy(key).count() rows/s; count() on format 2 against a
    parallel raw download of the same format 2 blob; and against Spark's own ceiling for a Python
    source, the same rows served from memory as the same Arrow batches in the same partitions
    (:class:`CachedRowsSource`), with the cost of a query over no rows at all. The queries run in
    FORMAT_ROUNDS rounds, each round every query once, and ratios are medians of per-round ratios."""
    azurite = Azurite(in_memory=True).start()
    saved = tempfile.mkdtemp(prefix="mv-bench-format-")
    try:
        conn = azurite.connection_string
        vault = Vault(StorageAccount(connection_string=conn)).ensure()
        events_ = events(messages, "small")
        committed = {}
        for record_format in (1, 2):
            stream = f"bench-format-v{record_format}"
            with vault.writer(stream, record_format=record_format) as w:
                for first in range(0, messages, PER_APPEND):
                    w.append([Batch(events_[first : first + PER_APPEND])])
            committed[record_format] = vault.blob(stream).state().committed
        spark = session()

        def df(record_format: int) -> DataFrame:
            # One partition per core for both formats: format 2's blob is 4x smaller, and at the
            # default 32 MiB it would be one partition (one core of two) where format 1 gets two.
            reader = spark.read.format("messagevault").option("connectionString", conn)
            reader = reader.option("minPartitions", str(TASKS))
            return reader.option("streams", f"bench-format-v{record_format}").load()

        # The ceiling reads what the vault source reads: the v2 blob's bytes, the same partitions.
        path = os.path.join(saved, "v2.log")
        with open(path, "wb") as out:
            out.write(vault.blob(CACHED_STREAM).read(0, committed[2]))
        plan = plan_read(
            ReadOptions.parse(
                {"connectionString": conn, "streams": CACHED_STREAM, "minPartitions": str(TASKS)}
            )
        )
        ranges = ",".join(f"{p.start}-{p.end}" for p in plan)
        cached = spark.read.format("mv_bench_cached").option("path", path).option("ranges", ranges)
        memory, empty = cached.load(), cached.option("empty", "true").load()

        for _ in range(2):  # warm-up: Python workers, imports, and the ceiling's rows in each worker
            assert df(1).count() == messages and df(2).count() == messages
            assert memory.count() == messages and empty.count() == 0
        assert azurite.process is not None
        pid = azurite.process.pid
        figures: dict[str, Any] = {"load average (1 min) at start": round(os.getloadavg()[0], 2)}
        figures["messages (~100 B JSON events)"] = messages
        # Rounds of every query in turn: a load that comes and goes on the shared machine slows
        # the queries of one round alike, and each ratio is the median of its per-round ratios.
        queries: dict[str, Callable[[], object]] = {
            "v1": partial(_count, df(1)),
            "v2": partial(_count, df(2)),
            "memory": memory.count,
            "empty": empty.count,
            "download": partial(download_all, vault, CACHED_STREAM, committed[2]),
            "v1 groupBy": partial(_group_count, df(1)),
            "v2 groupBy": partial(_group_count, df(2)),
        }
        walls: dict[str, list[float]] = {q: [] for q in queries}
        cpu: dict[str, dict[str, float]] = {q: {} for q in queries}
        for _ in range(FORMAT_ROUNDS):
            for q, fn in queries.items():
                before = cpu_by_process(pid)
                walls[q].append(timed(fn))
                after = cpu_by_process(pid)
                for k in after:
                    cpu[q][k] = cpu[q].get(k, 0.0) + (after[k] - before.get(k, 0.0)) / FORMAT_ROUNDS

        def wall(q: str) -> float:
            return statistics.median(walls[q])

        def ratio(slow: str, fast: str) -> float:
            """How many times faster ``fast`` ran than ``slow``: the median over the rounds."""
            return round(statistics.median(s / f for s, f in zip(walls[slow], walls[fast], strict=True)), 3)

        for f in (1, 2):
            figures[f"v{f}: stream MiB"] = round(committed[f] / MIB, 2)
            figures[f"v{f}: count() rows/s"] = round(messages / wall(f"v{f}"))
            figures[f"v{f}: groupBy(key).count() rows/s"] = round(messages / wall(f"v{f} groupBy"))
        figures["count() rows/s v2 / v1 (>= 3)"] = ratio("v1", "v2")
        figures["groupBy(key).count() rows/s v2 / v1 (>= 2)"] = ratio("v1 groupBy", "v2 groupBy")
        figures[f"v2 download s ({TASKS * PREFETCH} threads x 4 MiB GETs)"] = round(wall("download"), 3)
        figures["v2 count() / raw parallel download of the v2 blob (>= 0.7)"] = ratio("download", "v2")
        figures[f"v2 partitions (minPartitions {TASKS})"] = len(plan)
        figures["in-memory Arrow source count() rows/s (same rows, batches, partitions)"] = round(
            messages / wall("memory")
        )
        figures["v2 count() / in-memory Arrow source count() (Spark's ceiling)"] = ratio("memory", "v2")
        figures["download / in-memory Arrow source count() (the best any Python source can do)"] = ratio(
            "download", "memory"
        )
        figures["in-memory Arrow source / v1 count() rows/s (v2 / v1 at Spark's ceiling)"] = ratio(
            "v1", "memory"
        )
        figures["count() s of the same partitions with no rows (Spark's cost per query)"] = round(
            wall("empty"), 3
        )
        for q, label in (
            ("v1", "v1 count()"),
            ("v2", "v2 count()"),
            ("memory", "in-memory Arrow source count()"),
            ("empty", "count() over no rows"),
            ("download", "v2 download"),
        ):
            figures[f"CPU s/run: {label}"] = cpu_text({k: round(v, 2) for k, v in cpu[q].items()})
        report("spark_read_format", f"./dev bench spark_read --format {messages}", figures)
        spark.stop()
    finally:
        azurite.cleanup()
        import shutil

        shutil.rmtree(saved, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--format"]:
        sys.exit(format_main(int(sys.argv[2]) if len(sys.argv) > 2 else 300_000))
    sys.exit(main())
