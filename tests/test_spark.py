"""The Spark pipeline on a real Azurite and a real local Spark: every path returns what the reader does."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from helpers import core_wheel
from helpers.spark_jvm import SPARK_PYTHON, DriverJvm

from vault_core.clock import ManualClock
from vault_core.pageblob import StreamBlob
from vault_core.pagelog import MAX_PAGE_WRITE, PAGE_SIZE
from vault_core.recordformat import Message, NewMessage
from vault_core.spark.options import ReadOptions, option_name, to_option_map
from vault_core.spark.plan import StreamRange, even_cuts, plan_read, split_range
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# pyspark, pyarrow and the modules that import them are imported by the tests that use them:
# every xdist worker collects this module, and one runs it (~0.35 CPU-s of imports each).
pytestmark = [
    pytest.mark.spark,  # all on one xdist worker: WHOLE_MODULES in conftest.py
    pytest.mark.skipif(
        not (importlib.util.find_spec("pyspark") and importlib.util.find_spec("pyarrow")),
        reason="needs pyspark and pyarrow (the spark extra)",
    ),
]

Row = tuple[str, int, int, bytes, bytes, str | None]
T0 = 1_750_000_000_000  # 2025-06-15T15:06:40Z
KiB = 1024


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    import pyspark
    from pyspark.sql import SparkSession

    from vault_core.spark import register

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers need this venv's pyarrow and vault_core, and pyspark from it, not from Spark's zip.
    os.environ["PYSPARK_PYTHON"], os.environ["MV_SPARK_PYTHON"] = str(SPARK_PYTHON), sys.executable
    jvm = DriverJvm(Path(pyspark.__file__).parent)  # quick-start options (and a class archive, if kept)
    # One task at a time: one Python worker to start and keep (each pays ~1 CPU-s of imports).
    # The JVM starts in a directory of its own, and so do the Python processes it starts, whose
    # import path begins there: not in this checkout, whose vault_core the core wheel's processes
    # must not find (test_the_core_wheel_alone_reads_a_stream_with_spark).
    checkout = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("spark-jvm"))
    try:
        session = (
            SparkSession.builder.master("local[1]")
            .appName("messagevault-tests")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")  # no thread redrawing a progress bar
            .config("spark.sql.session.timeZone", "Asia/Kolkata")  # UTC+5:30: catches local-time slips
            .config("spark.driver.memory", "2g")
            .config("spark.driver.extraJavaOptions", jvm.options)
            .config("spark.driver.extraClassPath", jvm.class_path)  # the jars most used first
            # lower() by the JVM's case mapping rather than ICU's, whose tables cost the JVM about
            # 2.5 CPU-s to build at its first call (per_key_per_hour's lower(hex(key)): ASCII).
            .config("spark.sql.icu.caseMappings.enabled", "false")
            # Python errors with their whole traceback, as the RDD-based paths (read_streams,
            # capture) report them: then the data source's tasks and theirs have the same
            # environment, so one daemon and its workers serve both (a Python start less).
            .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
            .getOrCreate()
        )
    finally:
        os.chdir(checkout)
    jvm.started(os.getpid())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
    jvm.stop()


# -- helpers ------------------------------------------------------------------------------


def expected(vault: Vault, stream: str, start: int = 0, end: int | None = None) -> list[Row]:
    return [_row(stream, m) for m in vault.reader.scan(stream, start, end)]


def _row(stream: str, m: Message) -> Row:
    return (stream, m.offset, m.timestamp, m.key, m.value, m.key.decode() if m.key_is_text else None)


def rows(df: DataFrame) -> list[Row]:
    from pyspark.sql import functions as F

    ms = F.expr("unix_millis(timestamp)")
    got = df.select("stream", "offset", ms, "key", "value", "key_text").collect()
    return sorted((r[0], r[1], r[2], bytes(r[3]), bytes(r[4]), r[5]) for r in got)


def arrow_rows(data: pa.Table | pa.RecordBatch) -> list[Row]:
    """The rows of Arrow data with the messagevault columns, as :func:`rows` gives them."""
    import pyarrow as pa

    stamps = data.column("timestamp")
    per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}[stamps.type.unit]
    ms = [t // per_ms for t in stamps.cast(pa.int64()).to_pylist()]
    columns = [data.column(name).to_pylist() for name in ("stream", "offset")] + [ms]
    columns += [data.column(name).to_pylist() for name in ("key", "value", "key_text")]
    return list(zip(*columns, strict=True))


def read_here(conn: str | None, streams: str, **options: Any) -> list[Row]:
    """What ``rows(load(spark, conn, streams, **options))`` returns, planned and read in this
    process by what the data source's planning step and tasks run (``plan_read``,
    ``read_partition``): no Spark job. For bounds and credentials, which Spark passes on as
    they are; each kind of read also goes through Spark in a test of its own."""
    from vault_core.spark.partition_reader import read_partition

    given = {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}
    given |= {"streams": streams} | ({"connectionString": conn} if conn else {})
    parts = plan_read(ReadOptions.parse(given))
    return sorted(row for part in parts for batch in read_partition(part) for row in arrow_rows(batch))


def rows_here(path: str, *, captured: bool = False) -> list[Row]:
    """What ``rows(spark.read.parquet(path))`` returns, read in this process with pyarrow: no
    Spark job. ``captured``: a capture's layout, each row's stream from its ``stream=``
    directory. Directories starting with ``_`` (a capture's progress and staging, a streaming
    sink's log) are left out, as Spark leaves them out."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    layout = ds.partitioning(pa.schema([("stream", pa.string()), ("date", pa.string())]), flavor="hive")
    return sorted(
        arrow_rows(ds.dataset(path, format="parquet", partitioning=layout if captured else None).to_table())
    )


def load(spark: SparkSession, conn: str, streams: str, **options: Any) -> DataFrame:
    reader = spark.read.format("messagevault").option("connectionString", conn).option("streams", streams)
    for k, v in options.items():
        reader = reader.option(k, v if isinstance(v, str) else json.dumps(v))
    return reader.load()


def write_batches(
    vault: Vault,
    stream: str,
    batches: Sequence[Sequence[NewMessage]],
    *,
    t0: int = T0,
    step_ms: int = 1000,
    **writer: int,
) -> Vault:
    """One append per batch, the clock ``step_ms`` apart, so every batch has its own timestamp."""
    clock = ManualClock(t0)
    v = Vault(vault.account, clock=clock)
    with v.writer(stream, WriterSettings(**writer)) as w:
        for batch in batches:
            w.append([Batch(list(batch))])
            clock.advance(step_ms)
    return v


def mixed_batches(seed: int, count: int, max_value: int, max_batch: int = 40) -> list[list[NewMessage]]:
    """Text, binary and empty keys; values from empty to ``max_value`` bytes."""
    rng = random.Random(seed)
    keys: list[str | bytes] = ["alpha", "beta", "gamma", b"\x00\xffbin", b"", "ключ"]
    return [
        [
            NewMessage(rng.randbytes(rng.choice([0, 1, 37, rng.randint(0, max_value)])), rng.choice(keys))
            for _ in range(rng.randint(1, max_batch))
        ]
        for _ in range(count)
    ]


def corrupt_value_byte(vault: Vault, stream: str, m: Message) -> None:
    """Flip one byte of ``m``'s value in storage (after the writer closed), page-aligned as Azure needs."""
    pos = m.offset + 32 + len(m.key) + len(m.value) // 2
    page = pos // PAGE_SIZE * PAGE_SIZE
    blob = vault.blob(stream)
    data = bytearray(blob.read(page, PAGE_SIZE))
    data[pos - page] ^= 0x5A
    cast(StreamBlob, blob).client.upload_page(bytes(data), offset=page, length=PAGE_SIZE)


@pytest.fixture(scope="module")
def big(vault: Vault) -> str:
    """~4.7 MiB with records up to ~70 KB, one across the 4 MiB write edge, an index point every
    32 KiB. (One edge proves what two did, in half the Spark tasks; 60 commits what 170 did, in
    a third of the requests.) Format 1, as the previous release wrote it: format 2 and mixed
    streams have their own test below."""
    stream = f"big-{random.Random().getrandbits(48):012x}"
    write_batches(
        vault, stream, mixed_batches(26, 60, 70_000, max_batch=17), index_spacing=32 * KiB, record_format=1
    )
    return stream


@pytest.fixture(scope="module")
def big_rows(vault: Vault, big: str) -> list[Row]:
    """What the reader returns for ``big``: read once for the tests that compare with it."""
    return expected(vault, big)


# -- planning (no Spark) ------------------------------------------------------------------


def test_split_range_cuts_at_the_furthest_boundary_within_the_limit() -> None:
    tens = [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert split_range(0, 100, tens, 35) == [(0, 30), (30, 60), (60, 90), (90, 100)]
    assert split_range(0, 100, [], 10) == [(0, 100)]  # no boundary: one piece, however large
    assert split_range(0, 100, [50], 10) == [(0, 50), (50, 100)]  # as small as boundaries allow
    assert split_range(5, 5, [1], 10) == []
    assert split_range(10, 40, [0, 10, 25, 40, 70], 100) == [(10, 40)]  # outside boundaries ignored


def test_even_cuts_pick_the_boundaries_nearest_equal_shares() -> None:
    tens = [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert even_cuts(0, 100, tens, 2) == [50] and even_cuts(0, 100, tens, 3) == [30, 70]
    assert even_cuts(0, 100, [12, 95], 4) == [12, 95]  # no boundary twice, none outside
    assert even_cuts(0, 100, [], 4) == [] and even_cuts(0, 100, tens, 1) == []


def test_plan_covers_the_range_with_bounded_partitions_on_index_points(
    azurite: Any, vault: Vault, big: str
) -> None:
    stream = big
    committed = vault.blob(stream).state().committed
    opts = ReadOptions.parse(
        {
            "connectionString": azurite.connection_string,
            "streams": stream,
            "maxPartitionBytes": str(256 * KiB),
        }
    )
    parts = plan_read(opts)
    points = {p.offset for p in vault.index.points(stream)}
    assert len(parts) > 20
    assert parts[0].start == 0 and parts[-1].end == committed
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    assert all(p.start in points for p in parts[1:])
    assert all(p.end - p.start <= 256 * KiB + 32 * KiB + 70_100 for p in parts)
    import pickle

    assert pickle.loads(pickle.dumps(parts[0])) == parts[0]
    spread = plan_read(replace(opts, max_partition_bytes=1 << 30, min_partitions=3))
    sizes = [p.end - p.start for p in spread]  # at the index points nearest thirds (one per 32 KiB)
    assert (
        len(spread) == 3 and spread[-1].end == committed and max(sizes) - min(sizes) < 2 * (32 * KiB + 70_100)
    )
    assert azurite.connection_string not in repr(parts[0])  # secrets stay out of logs and the UI


def test_options_are_checked_with_clear_messages(azurite: Any) -> None:
    conn = azurite.connection_string
    with pytest.raises(ValueError, match="streams"):
        ReadOptions.parse({"connectionString": conn})
    with pytest.raises(ValueError, match="fromOffset or fromTime"):
        ReadOptions.parse({"connectionString": conn, "streams": "a", "fromOffset": "0", "fromTime": "0"})
    with pytest.raises(ValueError, match="unknown"):
        ReadOptions.parse({"connectionString": conn, "streams": "a", "formOffset": "0"})
    with pytest.raises(ValueError, match="no storage connection"):
        ReadOptions.parse({"streams": "a"})
    opts = ReadOptions.parse(
        {
            "ConnectionString": conn,
            "streams": "a, b",
            "fromTime": "2025-01-01T00:00:00",
            "toOffset": '{"b": 100}',
            "skipCorrupt": "TRUE",
        }
    )
    assert opts.streams == ("a", "b") and opts.skip_corrupt
    assert opts.start.for_stream("a").value == 1_735_689_600_000
    assert opts.end.for_stream("b").value == 100 and opts.end.for_stream("a").kind == "latest"


def test_each_read_streams_keyword_is_an_option_by_its_snake_case_name() -> None:
    from vault_core.spark.legacy import ReadKeywords

    assert option_name("from_offset") == "fromOffset" and option_name("sas") == "sas"
    assert to_option_map(connection_string="c", from_offset={"a": 1}, skip_corrupt=True, sas=None) == {
        "connectionString": "c",
        "fromOffset": '{"a": 1}',
        "skipCorrupt": "true",
    }
    given: dict[str, str | None] = {keyword: "1" for keyword in ReadKeywords.__annotations__}  # known options
    given |= {"skip_corrupt": "true", "sas": None, "from_time": None, "to_time": None}
    opts = ReadOptions.parse(to_option_map(connection_string="c", streams="a", **given))
    assert opts.skip_corrupt and opts.start.for_stream("a").value == 1 and opts.connection.table_prefix == "1"


def test_columnar_decoder_accepts_and_refuses_exactly_what_format_decode_does() -> None:
    from vault_core.errors import FormatError
    from vault_core.recordformat import MAGIC, decode, encode
    from vault_core.spark.columnar import Decoder

    rng = random.Random(11)
    # some values carry the sync marker, which the split path must hand over to the chain path
    keys: list[str | bytes] = ["k", b"\x00\xff", "", "ключ"]
    marker = [MAGIC * rng.randint(1, 2) if i % 17 == 0 else b"" for i in range(1500)]
    sent = [NewMessage(rng.randbytes(rng.randint(0, 3000)) + m, rng.choice(keys)) for m in marker]
    buf = encode(sent, 4096, T0)
    ref, _ = decode(buf, 4096)

    def as_rows(c: Any) -> list[tuple[Any, ...]]:
        cols = [a.to_pylist() for a in c.arrays]
        return [(o, int(t.timestamp() * 1000), k, v, kt) for o, t, k, v, kt in zip(*cols, strict=True)]

    def ref_rows(ms: Sequence[Message]) -> list[tuple[Any, ...]]:
        return [_row("", m)[1:] for m in ms]

    whole = Decoder(buf, 4096, last=True).pieces().joined()
    assert as_rows(whole) == ref_rows(ref) and whole.end == len(buf) and whole.error is None
    for cut in (0, 31, 33, len(buf) // 3 + 7, len(buf) - 1):
        part, (records, pos) = Decoder(buf[:cut], 4096).pieces().joined(), decode(buf[:cut], 4096)
        assert as_rows(part) == ref_rows(records) and part.end == pos and part.error is None
        assert (Decoder(buf[:cut], 4096, last=True).pieces().joined().error is not None) == (pos < cut)
    mid = ref[700].offset - 4096
    assert as_rows(Decoder(buf, 4096, mid, last=True).pieces().joined()) == ref_rows(ref[700:])
    for victim, delta in ((100, 40), (300, 0), (500, 9), (600, 12), (800, 16), (1499, 33)):
        bad = bytearray(buf)
        bad[ref[victim].offset - 4096 + delta] ^= 1
        got = Decoder(bytes(bad), 4096, last=True, stream="s").pieces().joined()
        with pytest.raises(FormatError) as raised:
            decode(bytes(bad), 4096, stream="s", complete=True)
        assert as_rows(got) == ref_rows(ref[:victim]) and str(got.error) == str(raised.value)


def test_a_run_of_units_becomes_one_arrow_batch_and_no_value_is_left_for_pyarrow_to_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decoder.pieces: one piece per run of format 2 units (up to BATCH_PAYLOAD_BYTES of payload:
    Spark pays per batch) and one per run of format 1 records, which Pieces.joined joins; and no
    Python value left for pyarrow to type (it looks for the optional dateutil on every such call:
    ~0.7 ms each, more than a unit's columns cost)."""
    import builtins

    from vault_core.recordformat import encode
    from vault_core.spark import columnar
    from vault_core.spark.columnar import Decoder
    from vault_core.unitformat import encode_unit

    base = 4096
    buf = encode([NewMessage(b"v1-%d" % i, "k") for i in range(30)], base, T0)
    sizes: tuple[int, ...] = (30,)
    starts = []
    for n, codec, text in ((500, 1, True), (7, 0, False), (3, 2, True)):
        values = [b'{"n":%d}' % i for i in range(n)]
        starts.append(base + len(buf))
        buf += encode_unit([b"k"] * n, values, base + len(buf), T0 + n, codec=codec, key_is_text=text)
        sizes += (n,)
    pieces = Decoder(buf, base, last=True, stream="s").pieces()
    assert [p.rows for p in pieces.parts] == [30, 510] and pieces.end == len(buf) and pieces.error is None
    whole = pieces.joined()
    monkeypatch.setattr(columnar, "BATCH_PAYLOAD_BYTES", 1)  # a piece per unit
    pieces = Decoder(buf, base, last=True, stream="s").pieces()
    assert tuple(p.rows for p in pieces.parts) == sizes and pieces.end == len(buf) and pieces.error is None
    joined = [[v for p in pieces.parts for v in p.arrays[i].to_pylist()] for i in range(5)]
    assert joined == [a.to_pylist() for a in whole.arrays] and whole.rows == sum(sizes)
    assert joined[3][30:32] == [b'{"n":0}', b'{"n":1}'] and joined[4][529:531] == ["k", None]
    assert joined[4][536:538] == [None, "k"]  # text keys in one unit, bytes in the next: per unit
    assert joined[0][529:532] == [starts[0] + 499, starts[1], starts[1] + 1] and joined[0][537] == starts[2]
    assert joined[1][530] == datetime.fromtimestamp((T0 + 7) / 1000, timezone.utc)

    attempted: list[str] = []
    real_import = builtins.__import__

    def watching(name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in sys.modules:
            attempted.append(name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = watching
    try:
        Decoder(buf, base, last=True, stream="s").pieces()
    finally:
        builtins.__import__ = real_import
    assert attempted == []


# -- batch reads through the data source --------------------------------------------------


def test_batch_read_equals_the_reader_row_for_row(
    spark: SparkSession, azurite: Any, big: str, big_rows: list[Row]
) -> None:
    from vault_core.spark.schema import SPARK_SCHEMA

    stream, want = big, big_rows
    edges = [MAX_PAGE_WRITE]
    assert all(any(r[1] < e < r[1] + 32 + len(r[3]) + len(r[4]) for r in want) for e in edges)
    # several partitions (edges between them) and 64 KiB reads (records larger than a read carry over several)
    df = load(
        spark,
        azurite.connection_string,
        stream,
        maxPartitionBytes=str(768 * KiB),
        readChunkBytes=str(64 * KiB),
    )
    assert df.schema == SPARK_SCHEMA
    assert rows(df) == want
    assert load(spark, azurite.connection_string, stream).count() == len(want)  # default: one partition


def test_offset_and_time_bounds(spark: SparkSession, azurite: Any, big: str, big_rows: list[Row]) -> None:
    stream, want = big, big_rows
    conn = azurite.connection_string
    a, b = len(want) * 4 // 10, len(want) * 6 // 10  # a few partitions' worth, inside the stream
    lo, hi = want[a][1], want[b][1]
    small = {"maxPartitionBytes": str(128 * KiB)}
    assert rows(load(spark, conn, stream, fromOffset=str(lo), toOffset=str(hi), **small)) == want[a:b]
    assert read_here(conn, stream, fromOffset=str(want[-1][1]), toOffset=str(1 << 40)) == want[-1:]
    t_from, t_to = T0 + 30_000, T0 + 37_000  # batch 30 inclusive .. batch 37 exclusive
    by_time = [r for r in want if t_from <= r[2] < t_to]
    iso = datetime.fromtimestamp(t_from / 1000, timezone.utc).isoformat()
    assert read_here(conn, stream, fromTime=iso, toTime=str(t_to), **small) == by_time
    assert by_time and by_time[0][2] == t_from
    with pytest.raises(Exception, match="not the start of a record"):
        load(spark, conn, stream, fromOffset=str(lo + 1)).count()


def test_several_streams_in_one_read(
    spark: SparkSession, azurite: Any, vault: Vault, big: str, big_rows: list[Row], stream: str
) -> None:
    write_batches(vault, stream, mixed_batches(2, 30, 3000))
    small = expected(vault, stream)
    big_stream = big
    start = big_rows[-50][1]
    want = sorted(big_rows[-50:] + small)
    conn = azurite.connection_string  # streams named by the option here, by load's path through Spark
    assert read_here(conn, f"{big_stream},{stream}", fromOffset={big_stream: start}) == want
    by_path = (
        spark.read.format("messagevault")
        .option("connectionString", azurite.connection_string)
        .option("fromOffset", json.dumps({big_stream: start}))
        .load(f"{stream},{big_stream}")
    )  # load("a,b") names the streams too
    assert rows(by_path) == want
    with pytest.raises(Exception, match="does not exist"):
        load(spark, azurite.connection_string, f"{stream},no-such-stream").count()


def test_sas_tokens_instead_of_a_connection_string(
    spark: SparkSession, azurite: Any, vault: Vault, stream: str
) -> None:
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.data.tables import AccountSasPermissions as TablePermissions
    from azure.data.tables import ResourceTypes as TableResources
    from azure.data.tables import generate_account_sas as table_sas
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    write_batches(vault, stream, mixed_batches(3, 20, 2000))
    name = "devstoreaccount1"
    key = azurite.connection_string.split("AccountKey=")[1].split(";")[0]
    expiry = datetime.now(timezone.utc) + timedelta(hours=1)
    blob_sas = generate_account_sas(
        name,
        key,
        ResourceTypes(container=True, object=True),
        AccountSasPermissions(read=True, list=True),
        expiry,
    )
    tsas = table_sas(
        AzureNamedKeyCredential(name, key), TableResources(object=True), TablePermissions(read=True), expiry
    )
    base = {"streams": stream, "blobUrl": f"http://127.0.0.1:{azurite.blob_port}/{name}"}
    with_index = (
        spark.read.format("messagevault")
        .options(
            **base, sas=blob_sas, tableUrl=f"http://127.0.0.1:{azurite.table_port}/{name}", tableSas=tsas
        )
        .load()
    )
    blob_only = read_here(None, stream, blobUrl=base["blobUrl"], sas=blob_sas)  # one partition/stream
    assert rows(with_index) == blob_only == expected(vault, stream)


# -- corruption ---------------------------------------------------------------------------


def test_a_corrupt_record_fails_the_read_or_is_skipped_and_counted(
    spark: SparkSession, azurite: Any, vault: Vault, stream: str, tmp_path: Path
) -> None:
    from vault_core.spark.partition_reader import read_skip_reports

    write_batches(
        vault,
        stream,
        [[NewMessage(b"v%04d" % i + b"." * 900, "k") for i in range(300)]],
        index_spacing=16 * KiB,
        record_format=1,  # the byte positions below are format 1's; units: the mixed-stream test
    )
    want = expected(vault, stream)
    middle, last = want[137], want[-1]
    for r in (middle, last):
        corrupt_value_byte(vault, stream, Message(r[1], r[2], r[3], r[4]))
    conn = azurite.connection_string
    with pytest.raises(Exception, match=rf"checksum mismatch.*stream '{stream}', offset {middle[1]}"):
        load(spark, conn, stream).count()
    report = tmp_path / "corrupt"
    got = rows(
        load(
            spark,
            conn,
            stream,
            skipCorrupt="true",
            corruptReportPath=str(report),
            maxPartitionBytes=str(64 * KiB),
            readChunkBytes=str(16 * KiB),
        )
    )
    assert got == [r for r in want if r not in (middle, last)]
    skips = [s for rep in read_skip_reports(str(report)) for s in rep["skips"]]  # type: ignore[attr-defined]
    size = 32 + 1 + 905
    assert sorted((s["offset"], s["bytes"]) for s in skips) == [(middle[1], size), (last[1], size)]


def test_a_mixed_stream_reads_as_the_reader_does_with_bounds_inside_units_and_a_damaged_unit(
    spark: SparkSession, azurite: Any, vault: Vault, stream: str
) -> None:
    """Format 1 commits, then format 2 units (zstd; codec none for random binary values): every
    row from Arrow arrays over the decompressed buffers, bounds inside units honoured."""
    write_batches(
        vault, stream, mixed_batches(7, 20, 3000, max_batch=8), index_spacing=8 * KiB, record_format=1
    )
    body = b'{"n":%d,"user":"u-%03d","v":%d}'
    json_events = [
        [NewMessage(body % (i, i % 97, i * 7919 % 10007), "k") for i in range(j, j + 400)]
        for j in range(0, 4000, 400)
    ]
    write_batches(vault, stream, json_events, t0=T0 + 10_000_000, index_spacing=8 * KiB)
    write_batches(vault, stream, mixed_batches(8, 5, 3000, max_batch=8), t0=T0 + 20_000_000)
    assert vault.reader.state(stream).format == 2
    want = expected(vault, stream)
    conn = azurite.connection_string
    small = {"maxPartitionBytes": str(16 * KiB), "readChunkBytes": str(8 * KiB)}
    assert rows(load(spark, conn, stream, **small)) == want
    pairs = list(itertools.pairwise(r[1] for r in want))
    inside = [o for before, o in pairs if o == before + 1]  # messages that do not start a unit
    lo, hi = inside[100], inside[-500]
    assert read_here(conn, stream, fromOffset=str(lo), toOffset=str(hi), **small) == [
        r for r in want if lo <= r[1] < hi
    ]
    json_rows = [r for r in want if T0 + 10_000_000 <= r[2] < T0 + 20_000_000]
    unit_at = json_rows[400][1]  # the second commit of events: one unit, damaged in its stored bytes
    page = (unit_at + 100) // PAGE_SIZE * PAGE_SIZE
    blob = vault.blob(stream)
    data = bytearray(blob.read(page, PAGE_SIZE))
    data[unit_at + 100 - page] ^= 0x5A
    cast(StreamBlob, blob).client.upload_page(bytes(data), offset=page, length=PAGE_SIZE)
    with pytest.raises(Exception, match="unit checksum mismatch"):
        load(spark, conn, stream, **small).count()
    got = rows(load(spark, conn, stream, skipCorrupt="true", **small))
    assert got == [r for r in want if r not in json_rows[400:800]]


# -- Structured Streaming -----------------------------------------------------------------


def test_streaming_resumes_from_its_checkpoint_without_loss_or_duplicates(
    spark: SparkSession, azurite: Any, vault: Vault, stream: str, tmp_path: Path
) -> None:
    other = stream + "-b"
    write_batches(vault, stream, mixed_batches(4, 40, 5000, max_batch=10), index_spacing=4 * KiB)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run() -> None:
        src = (
            spark.readStream.format("messagevault")
            .option("connectionString", azurite.connection_string)
            .option("streams", f"{stream},{other}")
            .option("maxPartitionBytes", str(64 * KiB))
            .load()
        )
        query = (
            src.writeStream.format("parquet")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(out)
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert rows_here(out) == expected(vault, stream)
    # more data, and a stream that did not exist during the first run
    write_batches(
        vault, stream, mixed_batches(5, 30, 5000, max_batch=10), t0=T0 + 10_000_000, index_spacing=4 * KiB
    )
    write_batches(vault, other, mixed_batches(6, 10, 1000))
    run()
    got = rows(spark.read.parquet(out))
    assert got == sorted(expected(vault, stream) + expected(vault, other))
    assert len(set(got)) == len(got)


# -- older Spark: no data source API ------------------------------------------------------


def test_read_streams_without_the_data_source_api(
    spark: SparkSession, azurite: Any, big: str, big_rows: list[Row]
) -> None:
    from vault_core.spark import read_streams
    from vault_core.spark.schema import SPARK_SCHEMA

    stream, want = big, big_rows
    first = len(want) - 100  # ~900 KB: seven partitions of 128 KiB
    lo = want[first][1]
    # rows pickled (arrow=False), and mapInArrow: the transfer chosen where pandas is installed
    # (the test venv has it, as Synapse does)
    for arrow in (False, None):
        df = read_streams(
            spark,
            azurite.connection_string,
            streams=[stream],
            from_offset=lo,
            max_partition_bytes=128 * KiB,
            arrow=arrow,
        )
        assert ("MapInArrow" in df._jdf.queryExecution().analyzed().toString()) == (arrow is None)
        assert df.schema == SPARK_SCHEMA
        assert rows(df) == want[first:]


def test_the_older_spark_path_never_imports_the_data_source_api() -> None:
    seen: set[str] = set()
    todo = ["vault_core.spark.legacy", "vault_core.spark.capture", "vault_core.spark.analysis"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = importlib.util.find_spec(name)
        assert spec and spec.origin
        tree = ast.parse(Path(spec.origin).read_text())
        for node in ast.walk(tree):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else ([a.name for a in node.names] if isinstance(node, ast.Import) else [])
            )
            for module in modules:
                assert not module.startswith("pyspark.sql.datasource"), f"{name} imports {module}"
                assert not module.startswith("pyspark.sql.streaming.datasource"), f"{name} imports {module}"
                if module.startswith("vault_core.spark"):
                    todo.append(module)
    assert "vault_core.spark.datasource" not in seen


def test_asking_the_data_source_for_its_schema_imports_neither_the_azure_sdk_nor_the_decoder() -> None:
    """Spark 4 runs each planning step in a Python process of its own, and the step that asks for
    the schema imports only ``vault_core.spark.datasource``: 0.4 CPU-s of imports instead of 1.2
    with the SDK. What its module-level imports reach (imports in functions run when called)."""

    def imported_at_load(nodes: Iterable[ast.AST]) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (
                isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            ):
                continue
            if isinstance(node, ast.ImportFrom) and not node.level:
                yield node.module or ""
            elif isinstance(node, ast.Import):
                yield from (a.name for a in node.names)
            else:
                yield from imported_at_load(ast.iter_child_nodes(node))

    seen: set[str] = set()
    todo = ["vault_core.spark.datasource"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = importlib.util.find_spec(name) if name.startswith("vault_core") else None
        if spec and spec.origin:
            todo.extend(imported_at_load(ast.parse(Path(spec.origin).read_text()).body))
    unwanted = ("azure", "vault_core.azure", "vault_core.spark.columnar")
    reached = sorted(m for m in seen if m.startswith(unwanted))
    assert reached == [] and "vault_core.spark.schema" in seen


# -- capture ------------------------------------------------------------------------------


def captured(spark: SparkSession, out: str) -> list[Row]:
    from vault_core.spark.analysis import read_capture

    return rows(read_capture(spark, out))


def test_capture_is_incremental_idempotent_and_survives_a_crash(
    spark: SparkSession,
    azurite: Any,
    vault: Vault,
    stream: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql import functions as F

    from vault_core.spark.analysis import per_key_per_hour, read_capture
    from vault_core.spark.capture import capture
    from vault_core.spark.capture import main as capture_main
    from vault_core.spark.files import LocalFiles
    from vault_core.spark.progress import Progress

    conn = azurite.connection_string
    other = stream + "-b"
    day = 86_400_000
    write_batches(vault, stream, mixed_batches(7, 40, 5000), t0=T0 - T0 % day - 30_000, step_ms=1000)
    write_batches(vault, other, mixed_batches(8, 5, 500))
    out = str(tmp_path / "capture")
    opts = ReadOptions.parse(
        {"connectionString": conn, "streams": f"{stream},{other}", "maxPartitionBytes": str(256 * KiB)}
    )

    first = capture(spark, opts, out)
    assert {(c.stream, c.start) for c in first} == {(stream, 0), (other, 0)}
    assert rows_here(out, captured=True) == sorted(expected(vault, stream) + expected(vault, other))
    dates = {p.name for p in (tmp_path / "capture" / f"stream={stream}").iterdir()}
    utc_day = datetime.fromtimestamp((T0 - T0 % day) / 1000, timezone.utc).date()
    assert dates == {f"date={utc_day - timedelta(days=1)}", f"date={utc_day}"}  # batches span UTC midnight
    assert capture(spark, opts, out) == []  # nothing new: nothing written

    # new data, then a run that dies after publishing its files but before saving progress
    write_batches(vault, stream, mixed_batches(9, 20, 5000), t0=T0 + day)

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("crash before progress")

    with monkeypatch.context() as m:
        m.setattr(Progress, "save", crash)
        with pytest.raises(RuntimeError, match="crash before progress"):
            capture(spark, opts, out)
    # the data is there, the progress is not
    assert rows_here(out, captured=True) == sorted(expected(vault, stream) + expected(vault, other))
    assert Progress(LocalFiles(), out).committed(stream) == {c.stream: c.end for c in first}[stream]
    write_batches(vault, stream, mixed_batches(10, 5, 5000), t0=T0 + 2 * day)

    # the rerun (through the CLI, with a file:// URI so the Hadoop file system path is used too)
    assert (
        capture_main(
            [
                "--connection-string",
                conn,
                "--streams",
                f"{stream},{other}",
                "--out",
                "file://" + out,
                "--max-partition-bytes",
                str(256 * KiB),
            ]
        )
        == 0
    )
    got = captured(spark, out)
    assert got == sorted(expected(vault, stream) + expected(vault, other))
    [saved] = (tmp_path / "capture" / "_progress" / stream).glob("*.json")
    assert json.loads(saved.read_text())["committed"] == vault.blob(stream).state().committed
    assert not (tmp_path / "capture" / "_staging").exists()

    # the example analysis agrees with a count done by hand
    report = {
        (r["stream"], r["key"]): (r["messages"], r["bytes"])
        for r in per_key_per_hour(read_capture(spark, out)).filter(F.col("stream") == other).collect()
    }
    want: Counter[tuple[str, str]] = Counter()
    size: Counter[tuple[str, str]] = Counter()
    for r in expected(vault, other):
        key = r[5] if r[5] is not None else "0x" + r[3].hex()
        want[(other, key)] += 1
        size[(other, key)] += len(r[4])
    assert report == {k: (n, size[k]) for k, n in want.items()}


def test_what_capture_and_streaming_read_next_is_what_was_committed_since_and_never_a_recreated_log() -> None:
    assert StreamRange.since("s", 100, 250, "remedy") == StreamRange("s", 100, 250)
    assert StreamRange.since("s", 250, 250, "remedy") is None
    with pytest.raises(ValueError, match=r"has 100 committed bytes but 250 .* recreated\? Start again"):
        StreamRange.since("s", 250, 100, "Start again.")


# -- the core wheel alone -----------------------------------------------------------------


def test_the_core_wheel_alone_reads_a_stream_with_spark(
    spark: SparkSession, vault: Vault, azurite: Any, stream: str, tmp_path: Path
) -> None:
    """The core's wheel, installed alone into a clean virtualenv beside what it declares
    (tests/helpers/core_wheel.py), reads a stream with Spark: every Python process Spark starts
    for the read (the planning steps and the task's worker) runs that virtualenv's Python, which
    imports vault_core from the wheel and pyspark, pyarrow and the Azure SDK from what the wheel
    declares, and nothing else (no pandas, no azure-storage-queue).

    The session's JVM drives them, through the data source registered again under a name of its
    own, with that Python. A driver of its own in the virtualenv would add only a second JVM's
    start (15-25 s and 6-14 CPU-s here, with a class archive or without: more than the rest of
    this test, ~5 CPU-s): the JVM's side is the same Spark either way, proved by every test
    above, and what the driver does with the core, ``register``, is one call with the class that
    the planning processes import from the wheel. So the virtualenv gets the session's pyspark
    version, as pip's constraint: its Python processes speak the JVM's protocol."""
    import pyspark
    from pyspark.sql.datasource import DataSourceReader, InputPartition
    from pyspark.sql.types import StructType

    from vault_core.spark import MessageVaultDataSource

    values = [f"message-{i}" for i in range(25)]
    with vault.writer(stream) as w:
        w.append([Batch([NewMessage(v.encode(), "k") for v in values[:10]])])
        w.append([Batch([NewMessage(v.encode(), "k") for v in values[10:]])])
    python = core_wheel.install_alone(tmp_path, pins=[f"pyspark=={pyspark.__version__}"])

    # Defined in this function, these are pickled by value (they cannot be imported by name); the
    # classes they extend, by reference: Spark's processes import them from the wheel. Each step
    # of the read notes, in its own process, where its Python found vault_core and what it lacks.
    notes = tmp_path / "origins"

    def note_origin(step: str) -> None:
        import importlib.util
        import os

        import vault_core

        undeclared = [m for m in ("pandas", "azure.storage.queue") if importlib.util.find_spec(m) is not None]
        notes.mkdir(exist_ok=True)
        (notes / f"{step}-{os.getpid()}.json").write_text(json.dumps([vault_core.__file__, undeclared]))

    class NotingReader(DataSourceReader):
        def __init__(self, reader: DataSourceReader) -> None:
            self.reader = reader

        def partitions(self) -> Sequence[InputPartition]:
            note_origin("plan")
            return self.reader.partitions()

        def read(self, partition: InputPartition) -> Iterator[Any]:
            note_origin("task")
            return self.reader.read(partition)

    class FromTheWheel(MessageVaultDataSource):
        @classmethod
        def name(cls) -> str:
            return "messagevault_wheel"

        def schema(self) -> StructType:
            note_origin("create")
            return super().schema()

        def reader(self, schema: StructType) -> DataSourceReader:
            return NotingReader(super().reader(schema))

    # What the functions wrapped from now on carry to their processes (the session's processes take
    # MV_SPARK_PYTHON from the JVM's environment, so it is not there, and is not left there).
    environment = spark.sparkContext.environment
    assert "MV_SPARK_PYTHON" not in environment
    environment["MV_SPARK_PYTHON"] = str(python)  # spark_python.sh runs this Python
    try:
        spark.dataSource.register(FromTheWheel)
        df = spark.read.format("messagevault_wheel").options(connectionString=azurite.connection_string)
        read = df.option("streams", stream).load().select("offset", "value").collect()
    finally:
        del environment["MV_SPARK_PYTHON"]
    assert [bytes(r.value).decode() for r in sorted(read)] == values
    origins = {path.name.split("-")[0]: json.loads(path.read_text()) for path in notes.iterdir()}
    assert sorted(origins) == ["create", "plan", "task"], origins
    for vault_core_file, undeclared in origins.values():
        assert Path(vault_core_file).is_relative_to(python.parent.parent), vault_core_file
        assert undeclared == []  # the read needed neither pandas nor azure-storage-queue
