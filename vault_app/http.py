"""Framework-neutral HTTP request/response types and the error → status mapping.

Handlers in :mod:`vault_app.api` take the app's :class:`~vault_app.runtime.Runtime` and a
:class:`Request`, and return a :class:`Response`;
``function_app.py`` converts to and from ``azure.functions`` types. Every error leaves as
JSON ``{"error": code, "message": text}``; nothing leaks a stack trace.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from vault_app.batches import IdempotencyMismatch
from vault_app.tail import Busy
from vault_core.errors import (
    InvalidInput,
    InvalidOffset,
    InvalidStreamName,
    MessageTooLarge,
    NotFound,
    VaultError,
    retriable,
)
from vault_core.retry import budget

if TYPE_CHECKING:
    from vault_app.runtime import Runtime

log = logging.getLogger("vault_app")


@dataclass(frozen=True)
class Request:
    method: str
    route: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lower-case header names."""
    body: bytes = b""
    repeated: frozenset[str] = frozenset()
    """Query parameters the URL names more than once (``query`` keeps one value of each): a
    credential sent twice must not count once (vault_app.auth)."""

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    mimetype: str = "application/json"


class HttpError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def repeated_query_names(url: str) -> frozenset[str]:
    """The query parameters that ``url`` names more than once."""
    names = Counter(name for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True))
    return frozenset(name for name, n in names.items() if n > 1)


def json_response(status: int, doc: Any, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, json.dumps(doc, separators=(",", ":")).encode(), dict(headers or {}))


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    return json_response(status, {"error": code, "message": message}, headers)


RETRY_AFTER_SECONDS = 5
BUSY_RETRY_AFTER_SECONDS = 2
"""A consumer told to come back when too many requests wait: soon, as waiters leave often."""


def to_http_error(exc: BaseException) -> HttpError:
    """The one place vault errors become HTTP statuses."""
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, InvalidStreamName):
        return HttpError(400, "invalid_stream", str(exc))
    if isinstance(exc, MessageTooLarge):
        return HttpError(413, "too_large", str(exc))
    if isinstance(exc, IdempotencyMismatch):
        return HttpError(422, "idempotency_mismatch", str(exc))
    if isinstance(exc, InvalidOffset):
        return HttpError(400, "invalid_offset", str(exc))
    if isinstance(exc, InvalidInput):
        return HttpError(400, "bad_request", str(exc))
    if isinstance(exc, Busy):
        return HttpError(429, "busy", f"{exc}; retry shortly", {"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)})
    if isinstance(exc, NotFound):
        return HttpError(404, "not_found", str(exc))
    if retriable(exc):  # storage down or throttling, or another writer busy: later may work
        return HttpError(
            503,
            "unavailable",
            f"storage is unavailable, retry later: {exc}",
            {"Retry-After": str(getattr(exc, "retry_after", None) or RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, VaultError):
        return HttpError(500, "storage_error", str(exc))
    return HttpError(500, "internal", "internal error; see the server log")


Handler = Callable[["Runtime", Request], Response]
AsyncHandler = Callable[["Runtime", Request], Awaitable[Response]]
T = TypeVar("T")


async def in_thread(rt: Runtime, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the runtime's request threads, off the event loop, with the caller's
    context (so its storage budget)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(rt.request_threads, call)


def guarded(handler: Handler | AsyncHandler) -> AsyncHandler:
    """Run a handler under one storage time budget and turn any exception into a JSON error.

    The budget (vault_core.retry: ``VAULT_REQUEST_BUDGET_SECONDS``, 4 s unless set) bounds every
    storage call of the request, retries included, so storage that is down or stalled answers
    503 within seconds. A synchronous handler runs in a thread (:func:`in_thread`), a coroutine
    on the event loop.
    """
    return guarded_for(None)(handler)


def guarded_for(seconds: float | None) -> Callable[[Handler | AsyncHandler], AsyncHandler]:
    """:func:`guarded` with a budget of its own, for operator routes that do more storage work.

    Such a handler must bound its own work well within ``seconds`` (and report what is left),
    so that it answers, rather than running into the budget and failing half done. ``None``:
    the request budget, as :func:`guarded`.
    """

    def wrap(handler: Handler | AsyncHandler) -> AsyncHandler:
        if inspect.iscoroutinefunction(handler):
            coroutine: AsyncHandler = handler

            async def run(rt: Runtime, request: Request) -> Response:
                try:
                    with budget(seconds):
                        response = await coroutine(rt, request)
                except Exception as exc:  # the boundary: nothing escapes as a stack trace
                    response = _failed(request, exc)
                return _finished(response)

        else:
            blocking: Handler = handler  # type: ignore[assignment]

            def run_blocking(rt: Runtime, request: Request) -> Response:
                try:
                    with budget(seconds):
                        response = blocking(rt, request)
                except Exception as exc:
                    response = _failed(request, exc)
                return _finished(response)

            async def run(rt: Runtime, request: Request) -> Response:
                return await in_thread(rt, run_blocking, rt, request)

        run.__name__ = handler.__name__
        run.__doc__ = handler.__doc__
        return run

    return wrap


def _failed(request: Request, exc: Exception) -> Response:
    err = to_http_error(exc)
    if err.status >= 500:
        log.error("request failed: %s %s", request.method, dict(request.route), exc_info=exc)
    return error_response(err.status, err.code, err.message, err.headers)


def _finished(response: Response) -> Response:
    # Browsers must not guess a type: a value that looks like HTML stays JSON or bytes.
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response
