"""The JVM options of the tests' Spark drivers, with a class-data-sharing archive kept between runs.

A Spark driver's JVM loads and verifies some ten thousand classes before its first query: about
17 CPU-s on this machine, 10 with the classes mapped from an archive the JVM wrote at the end of an
earlier run (JDK 17's dynamic CDS: ``-XX:ArchiveClassesAtExit``, then ``-XX:SharedArchiveFile``).
The archive is kept per JVM and Spark installation (the key), beside the core wheel's cache, and
written only when WRITE_ARCHIVE is set; without an archive a JVM starts with QUICK_START alone.

The JVM writes the archive as it exits, after the tests' Python has gone: so it writes to a file of
its own, named with a marker holding its pid, and a later run promotes the file once that JVM has
exited. If the archive does not fit (another JVM, another class path), the JVM says so and runs
without it (``-Xshare:auto``, the default).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import psutil

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "message-vault" / "spark-cds"
STOP_TIMEOUT = 300.0
"""Seconds a JVM gets to exit: writing the archive takes seconds, a minute or more on a loaded machine."""
UNUSED_FOR = 7 * 24 * 3600
"""An archive no run has used for this long is removed (its JVM or Spark was replaced)."""
WRITE_ARCHIVE = "MV_TEST_SPARK_ARCHIVE"
"""Set (to anything) to have a JVM with no archive yet write one as it exits. Off by default:
writing it costs the run that does it more than a later run saves (single Spark test: 60 s
writing, 22 s with the archive, 28 s with neither), and a fresh clone (CI) never has one, since
the key holds the Spark installation's path. Worth it for a developer running Spark tests often."""
FIRST_JARS = (
    "spark-catalyst_",
    "scala-library-",
    "spark-core_",
    "spark-sql_",
    "scala-reflect-",
    "log4j-core-",
    "spark-sql-api_",
    "hadoop-client-api-",
    "parquet-column-",
    "jackson-databind-",
    "arrow-vector-",
    "parquet-encoding-",
    "janino-",
    "spark-config_",
    "parquet-format-structures-",
    "parquet-jackson-",
)
"""The jars (by name) the Spark tests load most classes from, most first: four in five of the
~16,000 classes (counted with ``-Xlog:class+load``). The JVM looks for a class in each jar of its
class path in turn, and Spark's has some 280 jars in directory order: named first, a class is
found in the first few instead of after a hundred misses on average. Only the order changes; a
jar not named here, or renamed by another Spark, is still found after them."""
SPARK_PYTHON = Path(__file__).with_name("spark_python.sh")
"""The tests' ``PYSPARK_PYTHON``: ``$MV_SPARK_PYTHON`` with pyspark imported from site-packages."""
QUICK_START = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
    " -Xlog:disable -Xlog:all=warning:stderr -Xmn200m -XX:MetaspaceSize=200m -XX:-UsePerfData"
)
"""A test session is short: the JIT's first tier and a serial GC start faster, with less CPU, and
the classes of Spark's jars are loaded without verifying their bytecode (a start costs about a
fifth less CPU, 7.4 CPU-s instead of 9.5 here: the tests check our Python, not Spark's jars). A
young generation and a class metadata space sized for Spark from the start spare the collections
that growing them would cost (the GC's CPU over the first two Spark tests about halves, 0.65 to
0.35 CPU-s). The JVM's warnings (the archive's among them, as it exits) go to stderr, not into a
script's output."""


def _key(spark_home: Path) -> str:
    java = os.path.realpath(shutil.which("java") or "java")
    jars = sorted(p.name for p in (spark_home / "jars").glob("*.jar"))
    return hashlib.sha256(json.dumps([java, str(spark_home), jars]).encode()).hexdigest()[:16]


def _promote(key: str) -> None:
    """An archive whose JVM has exited becomes the key's archive; one still being written waits."""
    for marker in CACHE.glob(f"{key}.*.pid"):
        partial = marker.with_suffix(".jsa-partial")
        pid, started = json.loads(marker.read_text() or "[0, 0]")
        with contextlib.suppress(psutil.Error):
            if pid and psutil.Process(pid).create_time() == started:
                continue  # still running, perhaps writing it now
        if partial.exists():
            partial.replace(CACHE / f"{key}.jsa")
        marker.unlink(missing_ok=True)


class DriverJvm:
    """The ``spark.driver.extraJavaOptions`` and ``extraClassPath`` of one Spark driver; call
    :meth:`started` once it runs."""

    def __init__(self, spark_home: Path) -> None:
        CACHE.mkdir(parents=True, exist_ok=True)
        self.key = _key(spark_home)
        _promote(self.key)
        archive = CACHE / f"{self.key}.jsa"
        for other in CACHE.glob("*.jsa"):  # ~160 MB each: those of installations gone or unused
            if other != archive and time.time() - other.stat().st_mtime > UNUSED_FOR:
                other.unlink(missing_ok=True)
        jars = sorted((spark_home / "jars").glob("*.jar"))
        first = [jar for prefix in FIRST_JARS for jar in jars if jar.name.startswith(prefix)]
        self.class_path = os.pathsep.join(map(str, first))
        """``spark.driver.extraClassPath``, which goes before Spark's jars: FIRST_JARS first."""
        self.marker: Path | None = None
        if archive.exists():
            os.utime(archive)  # used now
            self.options = f"{QUICK_START} -XX:SharedArchiveFile={archive}"
        elif not os.environ.get(WRITE_ARCHIVE):
            self.options = QUICK_START
        else:
            self.marker = CACHE / f"{self.key}.{uuid.uuid4().hex[:8]}.pid"
            self.marker.write_text("")  # no JVM yet: promoted as soon as none writes it
            partial = self.marker.with_suffix(".jsa-partial")
            self.options = f"{QUICK_START} -XX:ArchiveClassesAtExit={partial}"

    def started(self, driver_pid: int) -> None:
        """Name the JVM that will write the archive (a child of ``driver_pid``)."""
        for child in psutil.Process(driver_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.name() == "java":
                    return self.runs_in(child.pid)

    def runs_in(self, jvm_pid: int) -> None:
        """Name the JVM that will write the archive (or has: then it is promoted next time)."""
        if self.marker is not None:
            with contextlib.suppress(psutil.Error):
                self.marker.write_text(json.dumps([jvm_pid, psutil.Process(jvm_pid).create_time()]))

    def stop(self) -> None:
        """After ``session.stop()``: end the driver's JVM and wait for it, as it may be writing the
        archive, so that no process of the run outlives it (Spark leaves the JVM to the driver's
        exit). The JVM exits at the end of its standard input."""
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        if gateway is None:
            return
        proc = gateway.proc
        proc.stdin.close()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        SparkContext._gateway = None  # a later session would start a JVM of its own
        SparkContext._jvm = None
