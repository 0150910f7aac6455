"""One structured log line per event, through the standard ``logging`` module.

The Functions host forwards ``logging`` records to Application Insights; the line is JSON so
that a Kusto query can ``parse_json(message)`` it (stream, batch ids, messages, bytes, timings).
"""

from __future__ import annotations

import json
import logging
from typing import Any


def event(logger: logging.Logger, name: str, **fields: Any) -> None:
    logger.info("%s", json.dumps({"event": name, **fields}, separators=(",", ":")))
