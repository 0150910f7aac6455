"""The capture job's own progress: per stream, the committed offset already in Parquet.

One small JSON file per stream and capture run, ``_progress/<stream>/<offset:016x>.json``;
the highest name is the progress. A new file is published (written aside, then renamed)
only after that run's Parquet files are in place, and older files are removed afterwards,
so no crash can leave a stream without progress or with progress ahead of its data. Nothing
is ever overwritten in place, which object stores and HDFS do not do atomically.
"""

from __future__ import annotations

import json
import posixpath
import re
from datetime import datetime, timezone

from vault_core.spark.files import Files

_NAME = re.compile(r"^([0-9a-f]{16})\.json$")


class Progress:
    def __init__(self, files: Files, root: str) -> None:
        self.files = files
        self.root = f"{root.rstrip('/')}/_progress"

    def _entries(self, stream: str) -> list[tuple[int, str]]:
        out = []
        for path in self.files.glob(f"{self.root}/{stream}/*.json"):
            m = _NAME.match(posixpath.basename(path))
            if m:
                out.append((int(m.group(1), 16), path))
        return sorted(out)

    def committed(self, stream: str) -> int:
        """Bytes of ``stream`` captured so far (0 before the first run)."""
        entries = self._entries(stream)
        return entries[-1][0] if entries else 0

    def save(self, stream: str, committed: int, **details: object) -> None:
        record = {
            "stream": stream,
            "committed": committed,
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **details,
        }
        self.files.publish_text(f"{self.root}/{stream}/{committed:016x}.json", json.dumps(record))
        for offset, path in self._entries(stream):
            if offset < committed:
                self.files.delete(path)
