"""The vault's HTTP API (docs/API.md) as Python calls: one httpx client, retries, error mapping."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from vault_client.auth import TokenCredential, auth_for
from vault_client.errors import ApiError, EndpointUnreachable, api_error
from vault_client.retry import RETRIABLE_STATUS, RetryPolicy, parse_retry_after
from vault_client.wire import decode_message, with_successors
from vault_core.errors import InvalidInput
from vault_core.limits import DEFAULT_READ_BYTES, DEFAULT_READ_MESSAGES
from vault_core.names import validate_batch_id, validate_stream_name
from vault_core.reader import ReadResult

DEFAULT_TIMEOUT = 30.0
REPLAY_SECONDS = 20.0
"""How long the server may work on one replay round (its storage budget): added to the timeout."""


@dataclass(frozen=True)
class Access:
    """What ``GET /streams/{s}/access`` hands out: a read-only SAS for one stream's blob."""

    stream: str
    blob_url: str
    sas: str
    expires: datetime
    """Timezone-aware; the SAS stops working at this instant."""
    committed: int = 0


def normalize_url(url: str) -> str:
    """``http://host:7071`` or ``http://host:7071/api`` → the API root, without a trailing slash.

    Functions serve HTTP triggers under ``/api`` by default, so a bare host gets it appended.
    """
    raw = (url or "").strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(f"invalid vault URL {url!r}: expected http(s)://host[:port][/api]")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path or '/api'}"


def _describe(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer in time ({exc.__class__.__name__})"
    text = str(exc) or exc.__class__.__name__
    return text.splitlines()[0]


def _poison_filters(stream: str | None, batch_id: str | None) -> dict[str, str]:
    params = {}
    if stream is not None:
        params["stream"] = validate_stream_name(stream)
    if batch_id is not None:
        params["batch"] = validate_batch_id(batch_id)
    return params


class ApiClient:
    """One vault endpoint. Thread-safe: the producer's senders and consumers share one.

    Credentials (at most one; none is anonymous, for streams an operator opened to everybody):
    ``key`` (a function key), ``token`` (a bearer token), or ``credential`` with ``scope``
    (azure-identity's ``DefaultAzureCredential()`` and ``"api://<client-id>/.default"``).
    """

    def __init__(
        self,
        url: str,
        key: str | None = None,
        *,
        token: str | None = None,
        credential: TokenCredential | None = None,
        scope: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        max_connections: int = 32,
    ) -> None:
        self.url = normalize_url(url)
        self.key = key
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.retries = 0
        """Requests tried again so far (throttling, unavailability, connection errors)."""
        self._credentials = (token, credential, scope)
        self._max_connections = max_connections
        self._http = httpx.Client(
            base_url=self.url,
            auth=auth_for(key, token, credential, scope),
            timeout=httpx.Timeout(timeout),
            transport=transport,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    def copy(self) -> ApiClient:
        """A client of its own (to close separately) with the same endpoint, credential and policy."""
        token, credential, scope = self._credentials
        return ApiClient(
            self.url,
            self.key,
            token=token,
            credential=credential,
            scope=scope,
            timeout=self.timeout,
            retry=self.retry,
            max_connections=self._max_connections,
        )

    # -- plumbing ------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        wait: float = 0.0,
        retry: RetryPolicy | None = None,
        idempotent: bool = False,
    ) -> httpx.Response:
        """Send one request, retrying throttling/unavailability/connection errors; raise on error answers.

        ``wait`` is the server-side long-poll time the request asks for: the read timeout
        is extended by it, so a long poll is not mistaken for a dead server. ``idempotent``:
        the request may be sent again whatever became of it (a POST with an
        ``Idempotency-Key``), so any 5xx is retried too: a 500 may mean that the server died
        under it, and then its outcome is unknown.
        """
        policy = retry or self.retry
        timeout = httpx.Timeout(self.timeout + wait, connect=min(self.timeout, 10.0))
        started = time.monotonic()
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                resp = self._http.request(
                    method, path, params=params, headers=headers, content=content, timeout=timeout
                )
            except httpx.TransportError as exc:
                error: Exception = EndpointUnreachable(
                    f"cannot reach the vault at {self.url}: {_describe(exc)}"
                )
            else:
                if resp.status_code < 400:
                    return resp
                error = self._error(resp)
                if resp.status_code not in RETRIABLE_STATUS and not (idempotent and resp.status_code >= 500):
                    raise error
                retry_after = parse_retry_after(resp.headers.get("retry-after"))
            delay = policy.delay(attempt, retry_after)
            if not policy.should_retry(attempt, started, delay):
                raise error
            self.retries += 1
            time.sleep(delay)
            attempt += 1

    @staticmethod
    def _error(resp: httpx.Response) -> ApiError:
        code, message = None, ""
        try:
            doc = resp.json()
            code, message = doc.get("error"), doc.get("message", "")
        except (ValueError, AttributeError):
            message = resp.text.strip().splitlines()[0][:200] if resp.text.strip() else ""
        return api_error(
            resp.status_code, code, message or f"HTTP {resp.status_code} from {resp.request.url}"
        )

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- routes ----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return dict(self.get_json("/health"))

    def streams(self) -> list[dict[str, Any]]:
        return list(self.get_json("/streams")["streams"])

    def stream(self, stream: str) -> dict[str, Any]:
        return dict(self.get_json(f"/streams/{validate_stream_name(stream)}"))

    def committed(self, stream: str) -> int:
        return int(self.stream(stream)["committed"])

    def batch(self, batch_id: str, stream: str | None = None) -> dict[str, Any]:
        """A batch's status; with its stream (a batch id belongs to its stream), never ambiguous."""
        if stream is None:
            return dict(self.get_json(f"/batches/{validate_batch_id(batch_id)}"))
        return dict(
            self.get_json(f"/streams/{validate_stream_name(stream)}/batches/{validate_batch_id(batch_id)}")
        )

    def whoami(self) -> dict[str, Any]:
        """``GET /whoami``: the caller as the vault sees it, and the stream patterns it may use."""
        return dict(self.get_json("/whoami"))

    def poison(self, stream: str | None = None, batch_id: str | None = None) -> dict[str, Any]:
        """``GET /poison``: up to 32 poisoned messages per poison queue, with statuses (needs admin)."""
        return dict(self.get_json("/poison", params=_poison_filters(stream, batch_id)))

    def replay_poison(self, stream: str | None = None, batch_id: str | None = None) -> dict[str, Any]:
        """``POST /poison/replay``: one bounded round; call again while ``complete`` is false.

        Safe to retry (and so retried like any request): a replayed batch is appended at most once.
        """
        params = _poison_filters(stream, batch_id)
        resp = self.request("POST", "/poison/replay", params=params, wait=REPLAY_SECONDS)
        return dict(resp.json())

    def access(self, stream: str) -> Access:
        doc = self.get_json(f"/streams/{validate_stream_name(stream)}/access")
        expires = datetime.fromisoformat(str(doc["expires"]).replace("Z", "+00:00"))
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=timezone.utc)
        return Access(doc["stream"], doc["blob_url"], doc["sas"], expires, int(doc.get("committed", 0)))

    def produce(
        self,
        stream: str,
        body: bytes,
        *,
        idempotency_key: str,
        wait: float = 0.0,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """POST one batch; retries reuse ``idempotency_key``, so the batch is staged once."""
        params = {"wait": f"{wait:g}"} if wait > 0 else None
        resp = self.request(
            "POST",
            f"/streams/{validate_stream_name(stream)}/messages",
            params=params,
            headers={"Idempotency-Key": idempotency_key, "Content-Type": content_type},
            content=body,
            wait=wait,
            idempotent=True,
        )
        return dict(resp.json())

    def read(
        self,
        stream: str,
        from_offset: int | None = None,
        *,
        at: int | str | None = None,
        limit: int = DEFAULT_READ_MESSAGES,
        max_bytes: int = DEFAULT_READ_BYTES,
        wait: float = 0.0,
    ) -> ReadResult:
        """One page of messages from ``from_offset`` (or the first at/after time ``at``)."""
        params: dict[str, Any] = {"limit": limit, "max_bytes": max_bytes}
        if at is not None:
            params["at"] = at
        else:
            params["from"] = from_offset or 0
        if wait > 0:
            params["wait"] = f"{wait:g}"
        doc = self.get_json(f"/streams/{validate_stream_name(stream)}/messages", params=params, wait=wait)
        next_offset = int(doc["next_offset"])
        messages = with_successors([decode_message(m) for m in doc["messages"]], next_offset)
        return ReadResult(messages, next_offset, int(doc["committed"]))

    def log(self, stream: str, start: int, length: int) -> tuple[bytes, int]:
        """Committed raw log bytes ``[start, start+length)`` (possibly fewer) and the committed length."""
        resp = self.request(
            "GET",
            f"/streams/{validate_stream_name(stream)}/log",
            headers={"Range": f"bytes={start}-{start + length - 1}"},
        )
        total = resp.headers.get("content-range", "").rpartition("/")[2]
        committed = int(total) if total.isdigit() else int(resp.headers.get("x-committed", "0"))
        return resp.content, committed
