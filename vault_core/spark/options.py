"""Reader options: parsed once, from the string map Spark hands a data source.

The same parser serves the Spark 4 data source, the older-Spark :func:`read_streams` and the
capture job, so every entry point means the same thing by ``fromTime`` or ``toOffset``.
Option names are case-insensitive, like Spark's own.

Positions (``fromOffset``/``toOffset``/``fromTime``/``toTime``) are inclusive at the start
and exclusive at the end. Each takes one value for every stream, or a JSON object with a
value per stream (streams it does not name get the default: earliest / latest).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Literal

from vault_core.errors import InvalidInput
from vault_core.names import validate_stream_name
from vault_core.positive import positive
from vault_core.spark.connection import Connection
from vault_core.times import to_millis

DEFAULT_MAX_PARTITION_BYTES = 32 * 1024 * 1024
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
DEFAULT_PREFETCH = 4

PositionKind = Literal["earliest", "latest", "offset", "time"]


@dataclass(frozen=True)
class Position:
    """Where a read starts or ends in one stream, before it is resolved to a byte offset."""

    kind: PositionKind
    value: int = 0

    def __str__(self) -> str:
        return self.kind if self.kind in ("earliest", "latest") else f"{self.kind} {self.value}"


EARLIEST = Position("earliest")
LATEST = Position("latest")


@dataclass(frozen=True)
class PositionSpec:
    """A default position plus per-stream overrides (from a JSON object option)."""

    default: Position
    per_stream: tuple[tuple[str, Position], ...] = ()

    def for_stream(self, stream: str) -> Position:
        return dict(self.per_stream).get(stream, self.default)


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    streams: tuple[str, ...]
    start: PositionSpec = PositionSpec(EARLIEST)
    end: PositionSpec = PositionSpec(LATEST)
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    min_partitions: int = 1
    skip_corrupt: bool = False
    corrupt_report_path: str | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    prefetch: int = DEFAULT_PREFETCH

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Parse Spark's option map; raises ValueError naming the option that is wrong."""
        opts = {k.lower(): str(v) for k, v in options.items() if v is not None}
        unknown = set(opts) - _KNOWN
        if unknown:
            raise ValueError(f"unknown messagevault option(s): {', '.join(sorted(unknown))}")
        connection = Connection(**_given((f.name for f in fields(Connection)), opts))
        # load("a,b") sets "path": accept it as the stream list when "streams" is not given
        listed = opts.get("streams") or opts.get("path", "")
        streams = tuple(s.strip() for s in listed.split(",") if s.strip())
        if not streams:
            raise ValueError("option 'streams' is required: a comma-separated list of stream names")
        for s in streams:
            validate_stream_name(s)
        if len(set(streams)) != len(streams):
            raise ValueError(f"option 'streams' names a stream twice: {listed!r}")
        return cls(
            connection=connection,
            streams=streams,
            start=_side(opts, "from", EARLIEST),
            end=_side(opts, "to", LATEST),
            max_partition_bytes=_positive(opts, "maxpartitionbytes", DEFAULT_MAX_PARTITION_BYTES),
            min_partitions=_positive(opts, "minpartitions", 1),
            skip_corrupt=_bool(opts, "skipcorrupt"),
            corrupt_report_path=opts.get("corruptreportpath") or None,
            chunk_bytes=_positive(opts, "readchunkbytes", DEFAULT_CHUNK_BYTES),
            prefetch=_positive(opts, "readprefetch", DEFAULT_PREFETCH),
        )


_KNOWN = {
    "connectionstring",
    "bloburl",
    "tableurl",
    "sas",
    "tablesas",
    "accesstoken",
    "container",
    "tableprefix",
    "streams",
    "fromoffset",
    "tooffset",
    "fromtime",
    "totime",
    "maxpartitionbytes",
    "minpartitions",
    "skipcorrupt",
    "corruptreportpath",
    "readchunkbytes",
    "readprefetch",
    "path",  # what load("a,b") sets
}


def option_name(keyword: str) -> str:
    """The option a Python keyword or field stands for: ``from_offset`` is ``fromOffset``."""
    first, *rest = keyword.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _given(names: Iterable[str], opts: Mapping[str, str]) -> dict[str, str]:
    """The values ``opts`` (keys lower-cased) gives for the options of these Python ``names``, by name."""
    return {name: opts[key] for name in names if (key := option_name(name).lower()) in opts}


def _side(opts: Mapping[str, str], side: str, default: Position) -> PositionSpec:
    offset, at = opts.get(f"{side}offset"), opts.get(f"{side}time")
    if offset is not None and at is not None:
        raise ValueError(f"give {side}Offset or {side}Time, not both")
    if offset is None and at is None:
        return PositionSpec(default)
    name = f"{side}Offset" if offset is not None else f"{side}Time"
    text = (offset if offset is not None else at) or ""
    parse_one = _parse_offset if offset is not None else _parse_time
    if text.lstrip().startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"option {name} is not valid JSON: {exc}") from exc
        per_stream = tuple((validate_stream_name(str(k)), parse_one(name, v)) for k, v in sorted(raw.items()))
        return PositionSpec(default, per_stream)
    return PositionSpec(parse_one(name, text))


def _parse_offset(name: str, value: object) -> Position:
    text = str(value).strip().lower()
    if text in ("earliest", "latest"):
        return EARLIEST if text == "earliest" else LATEST
    try:
        offset = int(text)
    except ValueError:
        raise ValueError(f"option {name}: expected an offset, earliest or latest, got {value!r}") from None
    if offset < 0:
        raise ValueError(f"option {name}: offsets are >= 0, got {offset}")
    return Position("offset", offset)


def _parse_time(name: str, value: object) -> Position:
    return Position("time", parse_time_ms(value, name))


def parse_time_ms(value: object, name: str = "time") -> int:
    """Epoch milliseconds from an integer, a datetime or text (:func:`vault_core.times.to_millis`)."""
    try:
        return to_millis(value if isinstance(value, (int, datetime)) else str(value))
    except InvalidInput as exc:
        raise ValueError(
            f"option {name}: expected epoch ms or an ISO-8601 time, got {value!r} ({exc})"
        ) from None


def _positive(opts: Mapping[str, str], key: str, default: int) -> int:
    return positive(opts, key, default, label=f"option {key}")


def _bool(opts: Mapping[str, str], key: str) -> bool:
    text = opts.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"option {key}: expected true or false, got {opts[key]!r}")
    return text == "true"


def to_option_map(**kwargs: object) -> dict[str, str]:
    """Python keyword values → the string map :meth:`ReadOptions.parse` takes (dicts become JSON);
    a keyword is an option's name, or its :func:`option_name` in snake case."""
    out: dict[str, str] = {}
    for keyword, value in kwargs.items():
        if value is None:
            continue
        key = option_name(keyword)
        if isinstance(value, Mapping):
            out[key] = json.dumps({k: _scalar(v) for k, v in value.items()})
        elif isinstance(value, (list, tuple)):
            out[key] = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(_scalar(value))
    return out


def _scalar(value: object) -> object:
    return to_millis(value) if isinstance(value, datetime) else value
