"""The OpenAPI 3 description of docs/API.md, served at ``GET /api/openapi.json``.

Every rule the app enforces on a request is in a schema where OpenAPI 3.0 can say it
(patterns, ranges, lengths, ``additionalProperties: false``), taken from the code that enforces
it (:mod:`vault_core.names`, :mod:`vault_core.limits`, :mod:`vault_app.params`), so generated
clients and validators refuse what the app refuses. A test checks that every route the app
registers is described here, and a property-based run generated from this document
(tests/test_openapi_contract.py) checks that the app and the document agree. What OpenAPI 3.0
cannot say is in the descriptions (docs/API.md "What the document cannot say").
"""

from __future__ import annotations

from typing import Any

from vault_app import ui
from vault_app.ingest import TEXT_ENCODINGS
from vault_app.params import IDEMPOTENCY_KEY_MAX, MAX_OFFSET, RANGE, READ_ENCODINGS, TIME, anchored
from vault_core import __version__
from vault_core.limits import (
    DEFAULT_READ_BYTES,
    DEFAULT_READ_MESSAGES,
    MAX_BATCH_BYTES,
    MAX_BATCH_MESSAGES,
    MAX_GROUPS,
    MAX_MESSAGE_BYTES,
    MAX_RATE_MINUTES,
    MAX_READ_BYTES,
    MAX_READ_MESSAGES,
    MAX_WAIT_SECONDS,
    MiB,
)
from vault_core.names import BATCH_ID_PATTERN, PRODUCER_BATCH_ID_PATTERN, STREAM_PATTERN
from vault_core.recordformat import MAX_KEY_BYTES


def _param(
    name: str, where: str, kind: str | dict[str, Any], text: str, required: bool = False
) -> dict[str, Any]:
    """``kind``: a type name, or the whole schema."""
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": {"type": kind} if isinstance(kind, str) else kind,
        "description": text,
    }


def _integer(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": lo, "maximum": hi}


def _json(schema: str) -> dict[str, Any]:
    """A JSON body of one of the components' schemas."""
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}


def _json_or_ndjson(schema: str) -> dict[str, Any]:
    """A JSON body of ``schema``, or its messages as NDJSON lines (by Content-Type or Accept)."""
    return {**_json(schema), "application/x-ndjson": {"schema": {"type": "string"}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): {"description": "error", "content": _json("Error")} for c in codes}


def _ok(status: int, schema: str, text: str = "ok") -> dict[str, Any]:
    return {str(status): {"description": text, "content": _json(schema)}}


def _answers(summary: str, parameters: list[Any], schema: str, errors: tuple[int, ...]) -> dict[str, Any]:
    """An operation that answers 200 with a ``schema`` body, or one of the ``errors``."""
    return {
        "summary": summary,
        "parameters": parameters,
        "responses": {**_ok(200, schema), **_errors(*errors)},
    }


STREAM_SCHEMA = {"type": "string", "pattern": anchored(STREAM_PATTERN)}
STREAM = _param(
    "stream",
    "path",
    STREAM_SCHEMA,
    "stream name: 1-128 of A-Z a-z 0-9 . _ -, starting with a letter or digit, not ending with .",
)
BATCH_ID = {"type": "string", "pattern": anchored(BATCH_ID_PATTERN)}
POISON_FILTERS = [
    _param("stream", "query", STREAM_SCHEMA, "only this stream's batches"),
    _param("batch", "query", BATCH_ID, "only the batch with this id"),
]
BATCH_ID_PARAM = _param(
    "id", "path", BATCH_ID, "batch id (another id names no batch: 404, as for an unknown one)"
)
WAIT = {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS}
_int = {"type": "integer", "format": "int64"}
_opt_int = {"type": "integer", "format": "int64", "nullable": True}
_opt_str = {"type": "string", "nullable": True}


def _per_queue(**fields: dict[str, Any]) -> dict[str, Any]:
    """An array with an object per staging queue: its account's index, its name, and ``fields``."""
    queue = {"account": _int, "queue": {"type": "string"}, **fields}
    return {"type": "array", "items": {"type": "object", "properties": queue}}


_LIMIT = f"1-{MAX_READ_MESSAGES} (default {DEFAULT_READ_MESSAGES})"
_MAX_BYTES = f"1-{MAX_READ_BYTES}: about this many bytes (default {DEFAULT_READ_BYTES // MiB} MiB)"
CREDENTIALS: list[dict[str, list[str]]] = [{"entraId": []}, {"functionKey": []}, {"functionKeyHeader": []}]

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    },
    "NewMessage": {
        "type": "object",
        "required": ["value"],
        "additionalProperties": False,
        "description": f"value: at most {MAX_MESSAGE_BYTES} bytes (VAULT_MAX_MESSAGE_BYTES), "
        f"key: at most {MAX_KEY_BYTES} bytes, as UTF-8 text or, with the encoding base64, the "
        "bytes it decodes to. null is the same as leaving a field out.",
        "properties": {
            "key": {"type": "string", "nullable": True},
            "key_encoding": {"type": "string", "nullable": True, "enum": [*TEXT_ENCODINGS, "base64", None]},
            "value": {"type": "string"},
            "encoding": {"type": "string", "nullable": True, "enum": [*TEXT_ENCODINGS, "base64", None]},
        },
    },
    "Batch": {
        "type": "object",
        "required": ["messages"],
        "additionalProperties": False,
        "properties": {
            "batch_id": {"type": "string", "nullable": True, "pattern": anchored(PRODUCER_BATCH_ID_PATTERN)},
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_BATCH_MESSAGES,
                "description": f"at most {MAX_BATCH_MESSAGES} (VAULT_MAX_BATCH_MESSAGES), "
                f"and at most {MAX_BATCH_BYTES} bytes of body (VAULT_MAX_BATCH_BYTES)",
                "items": {"$ref": "#/components/schemas/NewMessage"},
            },
        },
    },
    "BatchStatus": {
        "type": "object",
        "required": ["batch_id", "stream", "status", "count"],
        "properties": {
            "batch_id": {"type": "string"},
            "stream": {"type": "string"},
            "status": {"type": "string", "enum": ["staging", "staged", "committed", "rejected"]},
            "count": _int,
            "first_offset": _int,
            "next_offset": _int,
            "timestamp": _int,
            "pieces": {
                "type": "array",
                "description": "a committed batch written as format 2 units: [offset, count] per unit it "
                "spans, runs of consecutive message offsets in order (docs/API.md 'Batch status')",
                "items": {"type": "array", "items": _int, "minItems": 2, "maxItems": 2},
            },
            "reason": {"type": "string"},
        },
    },
    "Message": {
        "type": "object",
        "properties": {
            "offset": _int,
            "timestamp": _int,
            "id": {"type": "string"},
            "key": {"type": "string"},
            "key_encoding": {"type": "string"},
            "value": {"type": "string"},
            "value_encoding": {"type": "string"},
        },
    },
    "Messages": {
        "type": "object",
        "properties": {
            "stream": {"type": "string"},
            "messages": {"type": "array", "items": {"$ref": "#/components/schemas/Message"}},
            "next_offset": _int,
            "committed": _int,
        },
    },
    "Stream": {
        "type": "object",
        "properties": {
            "stream": {"type": "string"},
            "committed": _int,
            "count": _int,
            "first_timestamp": _opt_int,
            "last_timestamp": _opt_int,
            "created": _opt_int,
            "updated": _opt_int,
        },
    },
    "Streams": {
        "type": "object",
        "properties": {
            "streams": {"type": "array", "items": {"$ref": "#/components/schemas/Stream"}},
            "queues": _per_queue(approximate_messages=_opt_int, poison_messages=_opt_int),
        },
    },
    "Access": {
        "type": "object",
        "properties": {
            "stream": {"type": "string"},
            "blob_url": {"type": "string"},
            "sas": {"type": "string"},
            "expires": {"type": "string", "format": "date-time"},
            "committed": _int,
        },
    },
    "WhoAmI": {
        "type": "object",
        "properties": {
            "principal": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["anonymous", "key", "token", "easyauth"]},
                    "id": _opt_str,
                    "name": _opt_str,
                    "app_id": _opt_str,
                    "roles": {"type": "array", "items": {"type": "string"}},
                    "groups": {"type": "array", "items": {"type": "string"}},
                    "expires": _opt_int,
                },
            },
            "permissions": {
                "type": "object",
                "description": "stream patterns per action (admin includes read and write)",
                "properties": {
                    a: {"type": "array", "items": {"type": "string"}} for a in ("read", "write", "admin")
                },
            },
        },
    },
    "Health": {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded"]},
            "version": {"type": "string"},
            "poison_messages": _opt_int,
            "queues": _per_queue(poison_messages=_opt_int),
            "waiting": _int,
        },
    },
    "Rates": {
        "type": "object",
        "properties": {
            "stream": {"type": "string"},
            "minutes": _int,
            "from": {**_int, "description": "the first minute's start (ms)"},
            "to": {**_int, "description": "now (ms)"},
            "committed": _int,
            "count": _int,
            "rates": {
                "type": "array",
                "description": "one entry per minute, oldest first; rate = messages (or bytes) / seconds",
                "items": {
                    "type": "object",
                    "properties": {
                        "time": {**_int, "description": "the minute's start (ms)"},
                        "messages": _int,
                        "bytes": _int,
                        "seconds": {"type": "number", "description": "60, or less for the running minute"},
                    },
                },
            },
        },
    },
    "Groups": {
        "type": "object",
        "properties": {
            "stream": {"type": "string"},
            "committed": _int,
            "last_timestamp": _opt_int,
            "truncated": {"type": "boolean", "description": f"more than {MAX_GROUPS} groups"},
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "group": {"type": "string"},
                        "offset": {**_int, "description": "the next offset the group reads"},
                        "member": _opt_str,
                        "updated": _int,
                        "lag_bytes": _int,
                        "first_unread_timestamp": _opt_int,
                        "lag_ms": {
                            **_opt_int,
                            "description": "the last message's timestamp minus the first unread one's",
                        },
                    },
                },
            },
        },
    },
    "PoisonMessage": {
        "type": "object",
        "properties": {
            "account": _int,
            "queue": {"type": "string", "description": "the staging queue; the message is in <queue>-poison"},
            "message_id": {"type": "string"},
            "inserted": _opt_int,
            "valid": {"type": "boolean", "description": "false: not a staging envelope, never replayed"},
            "batch_id": _opt_str,
            "stream": _opt_str,
            "count": _opt_int,
            "claim_check": {"type": "boolean", "nullable": True},
            "error": _opt_str,
            "preview": _opt_str,
            "status": {
                "type": "string",
                "nullable": True,
                "enum": ["staging", "staged", "committed", "rejected", None],
            },
            "reason": _opt_str,
        },
    },
    "PoisonList": {
        "type": "object",
        "properties": {
            "messages": {"type": "array", "items": {"$ref": "#/components/schemas/PoisonMessage"}},
            "queues": _per_queue(poison_messages=_opt_int, peeked=_int, truncated={"type": "boolean"}),
            "truncated": {"type": "boolean", "description": "some poison queue holds more than was listed"},
        },
    },
    "PoisonReplay": {
        "type": "object",
        "properties": {
            "replayed": _int,
            "invalid": _int,
            "skipped": _int,
            "repeated": _int,
            "complete": {"type": "boolean", "description": "false: call again to go on"},
            "batches": {"type": "array", "items": {"$ref": "#/components/schemas/PoisonMessage"}},
            "invalid_messages": {"type": "array", "items": {"$ref": "#/components/schemas/PoisonMessage"}},
        },
    },
}

PATHS: dict[str, Any] = {
    "/streams/{stream}/messages": {
        "post": {
            "summary": "Stage a batch of messages (202 once durably staged)",
            "parameters": [
                STREAM,
                _param("wait", "query", WAIT, f"0-{MAX_WAIT_SECONDS}: wait for the commit"),
                _param(
                    "Idempotency-Key",
                    "header",
                    {"type": "string", "minLength": 1, "maxLength": IDEMPOTENCY_KEY_MAX},
                    "a retry with the same key stages once",
                ),
            ],
            "requestBody": {
                "required": True,
                "content": _json_or_ndjson("Batch"),
            },
            "responses": {
                **_ok(202, "BatchStatus", "staged"),
                **_ok(200, "BatchStatus", "committed within wait, or a retried batch committed already"),
                **_errors(400, 413, 422, 503),
            },
        },
        "get": {
            "summary": "Read messages from an offset or a time; long-poll at the tail",
            "parameters": [
                STREAM,
                _param("from", "query", _integer(0, MAX_OFFSET), "record boundary to start at (default 0)"),
                _param(
                    "at",
                    "query",
                    {"type": "string", "pattern": anchored(TIME)},
                    "time (ms or ISO 8601): first message at or after it; not with from",
                ),
                _param("limit", "query", _integer(1, MAX_READ_MESSAGES), _LIMIT),
                _param("max_bytes", "query", _integer(1, MAX_READ_BYTES), _MAX_BYTES),
                _param("wait", "query", WAIT, f"0-{MAX_WAIT_SECONDS}: wait for data at the tail"),
                _param(
                    "encoding",
                    "query",
                    {"type": "string", "enum": list(READ_ENCODINGS)},
                    "base64: never return values as text (default utf-8: text where it is UTF-8)",
                ),
            ],
            "responses": {
                "200": {
                    "description": "messages",
                    "content": _json_or_ndjson("Messages"),
                },
                **_errors(400, 404, 416, 429),
            },
        },
    },
    "/streams/{stream}/log": {
        "get": {
            "summary": "Raw committed bytes of the log (docs/FORMAT.md), by HTTP Range",
            "parameters": [
                STREAM,
                _param(
                    "Range",
                    "header",
                    {"type": "string", "pattern": anchored(RANGE)},
                    "bytes=a-b, bytes=a- or bytes=-n (one range, at most 16 MiB served)",
                ),
            ],
            "responses": {
                "206": {
                    "description": "bytes",
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                    },
                },
                "200": {
                    "description": "an empty stream, read without Range: no bytes",
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                    },
                },
                **_errors(400, 404, 416),
            },
        }
    },
    "/streams/{stream}/access": {
        "get": _answers("A short-lived read-only SAS for the stream's blob", [STREAM], "Access", (400, 404)),
    },
    "/streams/{stream}": {
        "get": _answers("One stream's catalog entry", [STREAM], "Stream", (400, 404)),
    },
    "/streams": {
        "get": {"summary": "All streams and staging queue depths", "responses": _ok(200, "Streams")}
    },
    "/streams/{stream}/rates": {
        "get": _answers(
            "Messages and bytes committed per minute (the explorer's ingest rate)",
            [
                STREAM,
                _param(
                    "minutes",
                    "query",
                    _integer(1, MAX_RATE_MINUTES),
                    f"1-{MAX_RATE_MINUTES}: the window (default 60)",
                ),
            ],
            "Rates",
            (400, 404, 503),
        ),
    },
    "/streams/{stream}/groups": {
        "get": _answers(
            "Consumer groups on the stream: position, lag in bytes and in time",
            [STREAM],
            "Groups",
            (400, 404, 503),
        ),
    },
    "/streams/{stream}/batches/{id}": {
        "get": _answers(
            "A batch's status on its stream", [STREAM, BATCH_ID_PARAM], "BatchStatus", (400, 404, 503)
        ),
    },
    "/batches/{id}": {
        "get": _answers(
            "A batch's status by id alone (409 if the id is used on several streams)",
            [BATCH_ID_PARAM],
            "BatchStatus",
            (404, 409, 503),
        ),
    },
    "/poison": {
        "get": _answers(
            "Poisoned batches: up to 32 per poison queue (a read-only peek), with statuses",
            POISON_FILTERS,
            "PoisonList",
            (400, 503),
        ),
    },
    "/poison/replay": {
        "post": _answers(
            "Send poisoned batches back to their staging queues (safe: batch ids are once-only)",
            POISON_FILTERS,
            "PoisonReplay",
            (400, 503),
        ),
    },
    "/health": {
        "get": {
            "summary": "Liveness (always 200) and poison counts; degraded if they cannot be read",
            "responses": _ok(200, "Health"),
        }
    },
    "/whoami": {
        "get": {
            "summary": "The caller as the app sees it, and the stream patterns it may use",
            "responses": _ok(200, "WhoAmI"),
        }
    },
    "/openapi.json": {
        "get": {
            "summary": "This document",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3"}},
        }
    },
    "/ui/{path}": {
        "get": {
            "summary": "The web explorer's files (no data: its page calls the API with your credential)",
            "description": "/ui/ is the page; a credential is not looked at. Strict Content-Security-Policy.",
            "parameters": [
                _param(
                    "path",
                    "path",
                    {"type": "string", "pattern": "^[^\\x00-\\x1f\\x7f]*$"},
                    "a file of the explorer; empty (/ui/): the page",
                )
            ],
            "security": [],
            "responses": {
                "200": {
                    "description": "the file",
                    "content": {t: {"schema": {"type": "string"}} for t in sorted(set(ui.TYPES.values()))},
                },
                "304": {"description": "not modified (If-None-Match)"},
                **_errors(404),
            },
        }
    },
}
UNSECURED = {"/openapi.json", "/ui/{path}"}
"""Served to anyone, credentials not even looked at: they carry no data."""

NEEDS: dict[tuple[str, str], str] = {
    ("/streams/{stream}/messages", "post"): "write on the stream",
    ("/streams/{stream}/messages", "get"): "read on the stream",
    ("/streams/{stream}/log", "get"): "read on the stream",
    ("/streams/{stream}/access", "get"): "read on the stream",
    ("/streams/{stream}", "get"): "read on the stream",
    ("/streams/{stream}/batches/{id}", "get"): "read on the stream",
    ("/streams/{stream}/rates", "get"): "read on the stream",
    ("/streams/{stream}/groups", "get"): "read on the stream",
    ("/streams", "get"): "read on some stream; lists those it may read, queues only for admin on *",
    ("/batches/{id}", "get"): "read on some stream; a batch of a stream it may not read is 404",
    ("/poison", "get"): "admin on the stream of ?stream=, or on every stream (*) without it",
    ("/poison/replay", "post"): "admin on the stream of ?stream=, or on every stream (*) without it",
    ("/health", "get"): "nothing; queue names and poison counts only for admin on *",
    ("/whoami", "get"): "nothing",
}
"""What each operation needs (docs/SECURITY.md); a test checks that every operation says."""
OPEN = {"nothing", "nothing; queue names and poison counts only for admin on *"}


def _secure(paths: dict[str, Any]) -> None:
    """Every operation but this document's: the credentials it takes, the permission it needs,
    and its 401 (credential missing or not acceptable) and 403 (not permitted) answers."""
    for (path, method), needs in NEEDS.items():
        op = paths[path][method]
        op["x-vault-permission"] = needs
        reads = needs.startswith("read")
        # {}: no credential at all, for open routes, and for reads of streams an operator
        # opened to anonymous callers (VAULT_ANONYMOUS_READ).
        op["security"] = [*CREDENTIALS, {}] if needs in OPEN or reads else CREDENTIALS
        op["description"] = f"Needs: {needs}." + (
            " Anonymous callers only for streams in VAULT_ANONYMOUS_READ." if reads else ""
        )
        op["responses"].update(_errors(401) if needs in OPEN else _errors(401, 403))


_secure(PATHS)

FRONT_END = (400, 408, 413, 414, 429, 431, 503)
"""What the front end before the app may answer to any request (docs/API.md "Request limits"):
a control character in the path, a body too slow or too large, a URL or headers too long, too
many requests held, a host that is stopping. The local host answers these as JSON errors;
Azure's front end may not."""


def _front_end(paths: dict[str, Any]) -> None:
    for operations in paths.values():
        for op in operations.values():
            for status, answer in _errors(*FRONT_END).items():
                op["responses"].setdefault(status, {**answer, "description": "from the front end"})


_front_end(PATHS)

SPEC: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "Message Vault for Azure Functions",
        "version": __version__,
        "description": "Publish-subscribe with replay and batching on Azure page blobs. See docs/API.md.",
    },
    "servers": [{"url": "/api"}],
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "securitySchemes": {
            "entraId": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "An Entra ID access token for the app registration (VAULT_AUTH_AUDIENCE), "
                "e.g. scope api://<client-id>/.default. App roles Vault.Read.All, Vault.Write.All, "
                "Vault.Admin (or Vault.<Action>.<pattern>) and the grants of VAULT_ACCESS_POLICY decide "
                "what it may do. See docs/SECURITY.md.",
            },
            "functionKey": {
                "type": "apiKey",
                "in": "query",
                "name": "code",
                "description": "One of the app's named keys (VAULT_FUNCTION_KEYS), checked by the app; "
                "its grants come from VAULT_ACCESS_POLICY. The header is better: URLs get logged.",
            },
            "functionKeyHeader": {"type": "apiKey", "in": "header", "name": "x-functions-key"},
        },
    },
}
