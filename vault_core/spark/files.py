"""The few file operations the capture job needs, on local disk or any Hadoop file system.

A plain path (``/data/capture``) uses the local file system directly; a URI
(``abfss://lake@acct.dfs.core.windows.net/capture``, ``file:///data/capture``) goes through
the Hadoop ``FileSystem`` of the running Spark session, so the job works wherever Spark
can write. Only operations that are safe to build a crash-consistent protocol on are
offered: publishing a *new* file name (write elsewhere, then rename), moving a file to a
name nobody else uses, deleting.
"""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from typing import Any, Protocol

from pyspark.sql import SparkSession


class Files(Protocol):
    def glob(self, pattern: str) -> list[str]:
        """Paths matching a glob (``*`` within one path segment)."""
        ...

    def list_files(self, directory: str) -> list[str]:
        """Every file below ``directory``, recursively; empty if it does not exist."""
        ...

    def read_text(self, path: str) -> str: ...

    def publish_text(self, path: str, text: str) -> None:
        """Create ``path`` (a name not in use) with ``text``, atomically: all of it or nothing."""
        ...

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, creating parent directories; ``dst`` is replaced if it exists."""
        ...

    def delete(self, path: str) -> None:
        """Delete a file or a directory tree; a missing path is fine."""
        ...


def files_for(spark: SparkSession, root: str) -> Files:
    return HadoopFiles(spark, root) if "://" in root else LocalFiles()


class LocalFiles:
    def glob(self, pattern: str) -> list[str]:
        return sorted(glob.glob(pattern))

    def list_files(self, directory: str) -> list[str]:
        return sorted(os.path.join(d, f) for d, _, names in os.walk(directory) for f in names)

    def read_text(self, path: str) -> str:
        with open(path, encoding="utf-8") as f:
            return f.read()

    def publish_text(self, path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def move(self, src: str, dst: str) -> None:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)

    def delete(self, path: str) -> None:
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


class HadoopFiles:
    """Through the JVM's Hadoop FileSystem (py4j), as Spark itself writes there."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm: Any = spark._jvm  # the usual way to reach Hadoop's FileSystem from PySpark
        self._jvm = jvm
        self._fs = jvm.org.apache.hadoop.fs.Path(root).getFileSystem(spark._jsc.hadoopConfiguration())

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def glob(self, pattern: str) -> list[str]:
        statuses = self._fs.globStatus(self._path(pattern)) or []
        return sorted(self._name(pattern, s.getPath().toString()) for s in statuses)

    def list_files(self, directory: str) -> list[str]:
        if not self._fs.exists(self._path(directory)):
            return []
        out = []
        it = self._fs.listFiles(self._path(directory), True)
        while it.hasNext():
            out.append(self._name(directory, it.next().getPath().toString()))
        return sorted(out)

    def read_text(self, path: str) -> str:
        stream = self._fs.open(self._path(path))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def publish_text(self, path: str, text: str) -> None:
        tmp = self._path(f"{path}.{uuid.uuid4().hex}.tmp")
        out = self._fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
            out.hsync()
        finally:
            out.close()
        if not self._fs.rename(tmp, self._path(path)):
            self._fs.delete(tmp, False)
            raise OSError(f"could not publish {path}: it exists or its directory is missing")

    def move(self, src: str, dst: str) -> None:
        target = self._path(dst)
        self._fs.mkdirs(target.getParent())
        if self._fs.exists(target):
            self._fs.delete(target, False)
        if not self._fs.rename(self._path(src), target):
            raise OSError(f"could not move {src} to {dst}")

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    @staticmethod
    def _name(given: str, qualified: str) -> str:
        # Hadoop qualifies paths (file:/x for file:///x); keep the caller's spelling of the root.
        if (
            given.startswith("file:///")
            and qualified.startswith("file:/")
            and not qualified.startswith("file:///")
        ):
            return "file://" + qualified[len("file:") :]
        return qualified
