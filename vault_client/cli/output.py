"""How ``vault consume`` writes messages: NDJSON objects, text lines, or the raw value bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

from vault_client.wire import message_json
from vault_core.recordformat import Message

OutputFormat = Literal["ndjson", "text", "raw"]


def _ndjson(m: Message) -> bytes:
    return (json.dumps(message_json(m), ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _text(m: Message) -> bytes:
    # Text for people: bytes that are not UTF-8 show as U+FFFD rather than failing the whole read.
    return m.value.decode("utf-8", errors="replace").encode("utf-8") + b"\n"


def _raw(m: Message) -> bytes:
    return m.value


FORMATTERS: dict[str, Callable[[Message], bytes]] = {"ndjson": _ndjson, "text": _text, "raw": _raw}
