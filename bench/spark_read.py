"""Spark read benchmark (issue 4): the messagevault data source against the bytes it reads.

    ./dev bench spark_read      (python -m bench.spark_read; SPARK_LOCAL_IP=127.0.0.1 is set for you)

One in-memory Azurite, one stream of 1,000,000 messages with 100-byte values (100 keys), one
local[2] Spark session. Every figure comes from the same run, so a noisy machine moves
both sides of each ratio alike. Each timing is the median of three runs after a warm-up.

  * download: the stream's committed bytes with plain ranged GETs (4 MiB each, one Get Blob
    apiece: ``StreamBlob.read``, the read the source's tasks make) from a thread pool as wide as
    Spark's reads are (2 tasks x 4 prefetched ranges = 8), no decoding
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
import time
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
from bench.events import event_batches
from vault_core.azure import StorageAccount
from vault_core.recordformat import NewMessage
from vault_core.spark.columnar import Decoder, record_batch
from vault_core.spark.options import ReadOptions
from vault_core.spark.plan import Partition, plan_read
from vault_core.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA
from vault_core.unitformat import opened_unit, sealed_unit
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings
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
    with vault.writer(stream, WriterSettings(record_format=1)) as w:
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


def cpu_since(before: dict[str, float], azurite_pid: int) -> dict[str, float]:
    """CPU seconds by process since ``before`` (a :func:`cpu_by_process`)."""
    return {k: v - before.get(k, 0.0) for k, v in cpu_by_process(azurite_pid).items()}


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
    """The rows of a read's partitions, decoded once by the driver into one Arrow IPC file per
    partition (:func:`save_partitions`) and served from those files memory-mapped, as the very
    Arrow batches the vault source yields for them: Spark's own cost of taking those rows from a
    Python source, with no I/O to storage and no decoding (the ceiling of any Python data
    source). ``empty``: the same partitions, no rows."""

    @classmethod
    def name(cls) -> str:
        return "mv_bench_cached"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CachedRowsReader(self.options["paths"].split(","), self.options.get("empty") == "true")


class CachedRowsReader(DataSourceReader):
    def __init__(self, paths: list[str], empty: bool) -> None:
        self.paths, self.empty = paths, empty

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.empty:
            return iter(())
        # Zero-copy: the batches' buffers are the mapped file's pages (in the page cache after
        # the warm-up round), shared by every Python worker.
        reader = pa.ipc.open_file(pa.memory_map(partition.value))
        return (reader.get_batch(i) for i in range(reader.num_record_batches))


def save_partitions(log: bytes, plan: list[Partition], directory: str) -> list[str]:
    """The batches the vault source yields for each partition of ``plan`` over ``log`` (a saved
    copy of the blob), one Arrow IPC file per partition: what :class:`CachedRowsSource` serves."""
    paths = []
    for i, part in enumerate(plan):
        data = log[part.start : part.end]
        pieces = Decoder(data, part.start, last=True, stream=CACHED_STREAM).pieces()
        assert pieces.error is None and pieces.end == len(data)
        path = os.path.join(directory, f"partition-{i}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, ARROW_SCHEMA) as out:
            for p in pieces.parts:
                out.write_batch(record_batch(CACHED_STREAM, p.arrays, p.rows, ARROW_SCHEMA))
        paths.append(path)
    return paths


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


def jobs_and_stages(spark: SparkSession, group: str) -> tuple[int, int]:
    """How many Spark jobs, and stages in them, ran under the job group ``group`` (skipped
    stages included: a stage whose shuffle output another job already wrote is counted but
    not run). From the status tracker, which works with the UI off and keeps the last 1,000."""
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
    return len(jobs), sum(len(j.stageIds) for j in jobs if j is not None)


def in_group(spark: SparkSession, group: str, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with its Spark jobs tagged ``group`` (for :func:`jobs_and_stages`)."""

    def run() -> object:
        spark.sparkContext.setJobGroup(group, group)
        return fn()

    return run


def _count(df: DataFrame) -> int:
    return df.count()


def _group_count(df: DataFrame) -> object:
    return df.groupBy("key").count().collect()


def format_main(messages: int, rounds: int = FORMAT_ROUNDS) -> int:
    """Format 2 against format 1 through Spark, on the same ~100 B JSON events (results:
    spark_read_format): count() and groupBy(key).count() rows/s; count() on format 2 against a
    parallel raw download of the same format 2 blob; and against Spark's own ceiling for a Python
    source, the same rows served from memory as the same Arrow batches in the same partitions
    (:class:`CachedRowsSource`), with the cost of a query over no rows at all. The queries run in
    ``rounds`` rounds after a warm-up round, each round every query once, and ratios are medians
    of per-round ratios."""
    started = time.perf_counter()
    load = round(os.getloadavg()[0], 2)
    azurite = Azurite(in_memory=True).start()
    saved = tempfile.mkdtemp(prefix="mv-bench-format-")
    try:
        conn = azurite.connection_string
        vault = Vault(StorageAccount(connection_string=conn)).ensure()
        assert azurite.process is not None
        pid = azurite.process.pid
        # The same events in both formats, generated a commit at a time (millions of them would
        # not fit in memory at once as Python objects).
        before_write = cpu_by_process(pid)
        with (
            vault.writer("bench-format-v1", WriterSettings(record_format=1)) as w1,
            vault.writer("bench-format-v2", WriterSettings(record_format=2)) as w2,
        ):
            for chunk in event_batches(messages, "small", PER_APPEND):
                w1.append([Batch(chunk)])
                w2.append([Batch(chunk)])
        write_s = time.perf_counter() - started
        write_cpu = cpu_since(before_write, pid)
        committed = {f: vault.blob(f"bench-format-v{f}").state().committed for f in (1, 2)}
        spark = session()

        def df(record_format: int) -> DataFrame:
            # At least one partition per core for both formats: format 2's blob is 4x smaller, and
            # below 32 MiB (the default partition size) it would be one partition, one core of two.
            reader = spark.read.format("messagevault").option("connectionString", conn)
            reader = reader.option("minPartitions", str(TASKS))
            return reader.option("streams", f"bench-format-v{record_format}").load()

        # The ceiling serves what the vault source yields: the v2 blob's rows, the same partitions.
        plan = plan_read(
            ReadOptions.parse(
                {"connectionString": conn, "streams": CACHED_STREAM, "minPartitions": str(TASKS)}
            )
        )
        v2_bytes = vault.blob(CACHED_STREAM).read(0, committed[2])
        paths = save_partitions(v2_bytes, plan, saved)
        cached = spark.read.format("mv_bench_cached").option("paths", ",".join(paths))
        memory, empty = cached.load(), cached.option("empty", "true").load()
        spark.sparkContext.setJobGroup("checks", "checks")
        assert df(1).count() == messages and df(2).count() == messages
        assert memory.count() == messages and empty.count() == 0
        figures: dict[str, Any] = {"load average (1 min) at start": load}
        figures["messages (~100 B JSON events)"] = messages
        figures["write s (both streams, 20k events a commit)"] = round(write_s, 1)
        figures["CPU s: writing both streams"] = cpu_text({k: round(v, 1) for k, v in write_cpu.items()})
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
            "memory groupBy": partial(_group_count, memory),
        }
        queries = {q: in_group(spark, q, fn) for q, fn in queries.items()}
        for fn in queries.values():  # a warm-up round: Python workers, imports, the JIT, the page cache
            fn()
        walls: dict[str, list[float]] = {q: [] for q in queries}
        cpu: dict[str, dict[str, float]] = {q: {} for q in queries}
        for _ in range(rounds):
            for q, fn in queries.items():
                before = cpu_by_process(pid)
                walls[q].append(timed(fn))
                after = cpu_by_process(pid)
                for k in after:
                    cpu[q][k] = cpu[q].get(k, 0.0) + (after[k] - before.get(k, 0.0)) / rounds

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
        figures[f"v2 partitions (minPartitions {TASKS}, 32 MiB at most)"] = len(plan)
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
        group = "groupBy(key).count()"
        figures[f"in-memory Arrow source {group} rows/s"] = round(messages / wall("memory groupBy"))
        figures[f"v2 {group} / in-memory Arrow source {group} (Spark's ceiling)"] = ratio(
            "memory groupBy", "v2 groupBy"
        )
        figures[f"in-memory Arrow source / v1 {group} rows/s (v2 / v1 at Spark's ceiling)"] = ratio(
            "v1 groupBy", "memory groupBy"
        )
        figures["count() s of the same partitions with no rows (Spark's cost per query)"] = round(
            wall("empty"), 3
        )
        figures["load average (1 min) at the end"] = round(os.getloadavg()[0], 2)
        # Jobs and stages per query (warm-up round included): each query should be a fixed few,
        # whatever the size; a count that grows with the data would be re-planning or re-reading.
        stage_ids, runs = 0, rounds + 1
        for q in [*queries, "checks"]:
            jobs, stages = jobs_and_stages(spark, q)
            stage_ids += stages
            if q != "checks" and jobs:
                figures[f"Spark jobs, stages per run: {q}"] = f"{jobs / runs:g}, {stages / runs:g}"
        figures["Spark stages in the whole run"] = stage_ids
        for q, label in (
            ("v1", "v1 count()"),
            ("v2", "v2 count()"),
            ("memory", "in-memory Arrow source count()"),
            ("v1 groupBy", "v1 groupBy(key).count()"),
            ("v2 groupBy", "v2 groupBy(key).count()"),
            ("memory groupBy", "in-memory Arrow source groupBy(key).count()"),
            ("empty", "count() over no rows"),
            ("download", "v2 download"),
        ):
            figures[f"CPU s/run: {label}"] = cpu_text({k: round(v, 2) for k, v in cpu[q].items()})
            # Both cores busy (2.0) means CPU-bound: only less CPU makes the query quicker, and
            # overlapping I/O inside a task cannot; well below 2 means it waits.
            figures[f"cores busy: {label} (CPU s / median wall s)"] = round(sum(cpu[q].values()) / wall(q), 2)
        figures.update(cpu_ceiling(cpu, walls, v2_bytes, rounds))
        whole = {k: round(v, 1) for k, v in cpu_by_process(pid).items()}
        figures["CPU s: the whole run"] = cpu_text(whole)
        figures["benchmark s"] = round(time.perf_counter() - started, 1)
        command = f"./dev bench spark_read --format {messages}"
        report("spark_read_format", command + (f" {rounds}" if rounds != FORMAT_ROUNDS else ""), figures)
        spark.stop()
    finally:
        azurite.cleanup()
        import shutil

        shutil.rmtree(saved, ignore_errors=True)
    return 0


def unit_checks_cpu(blob: bytes, rounds: int) -> float:
    """CPU seconds (median of ``rounds``, one thread) to check and decompress every unit of a
    format 2 blob: what any reader of it must do, whatever it then builds (§11.5 up to decompression)."""
    times = []
    for _ in range(rounds):
        start, pos = time.thread_time(), 0
        while pos < len(blob):
            sealed = sealed_unit(blob, pos, 0, len(blob), complete=True)
            assert sealed is not None
            pos += opened_unit(sealed).length
        times.append(time.thread_time() - start)
    return statistics.median(times)


def cpu_ceiling(
    cpu: dict[str, dict[str, float]], walls: dict[str, list[float]], v2_bytes: bytes, rounds: int
) -> dict[str, Any]:
    """The most count() v2 / v1 can reach here, from the CPU each query took in this run.

    Every query keeps both cores busy (``cores busy`` near 2), so its wall time follows its CPU.
    The least a format 2 count() can take: Spark taking the same rows from memory (the in-memory
    source, Python and JVM), Azurite serving the format 2 blob's bytes (the download's Azurite
    CPU), and checking and decompressing its units (on one thread, here). v1's count() CPU over
    that least is the ceiling of v2 / v1 on a machine whose storage shares the two cores."""
    checks = unit_checks_cpu(v2_bytes, rounds)
    least = sum(cpu["memory"].values()) + cpu["download"].get("azurite", 0.0) + checks
    v1 = sum(cpu["v1"].values())
    ceiling = v1 / least
    reached = statistics.median(s / f for s, f in zip(walls["v1"], walls["v2"], strict=True))
    return {
        "v2 units checked and decompressed, CPU s (one thread)": round(checks, 3),
        "v2 count(), least CPU s (in-memory source + Azurite serving v2 + decompressing)": round(least, 2),
        "v1 count() CPU s / that least (the ceiling of count() v2 / v1 here)": round(ceiling, 3),
        "count() rows/s v2 / v1 / that ceiling": round(reached / ceiling, 3),
    }


def format_args(args: list[str]) -> tuple[int, int]:
    """``--format [MESSAGES [ROUNDS]]``'s numbers, each defaulted on its own (the defaults were
    once padded onto the list together, so ``--format 2000000`` ran 300,000 rounds)."""
    messages = int(args[0]) if args else 300_000
    rounds = int(args[1]) if len(args) > 1 else FORMAT_ROUNDS
    return messages, rounds


if __name__ == "__main__":
    if sys.argv[1:2] == ["--format"]:
        sys.exit(format_main(*format_args(sys.argv[2:4])))
    sys.exit(main())
