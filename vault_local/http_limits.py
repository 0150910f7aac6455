"""The Functions front end's limits on HTTP requests, for the local host.

Azure puts a front end before the Functions host that a test against the local host would
otherwise never meet: requests are at most 100 MB, URLs 4 KiB and request headers 32 KiB
together (Kestrel's MaxRequestHeadersTotalSize: 431 beyond); the host queues at most
``maxOutstandingRequests`` requests and runs at most ``maxConcurrentRequests`` of them
(host.json ``extensions.http``, 200 and 100 by default on Consumption), answering 429 beyond;
and Kestrel, the web server, gives a client 30 s to send its request headers and then expects
its body at no less than 240 bytes/s after a 5 s grace. The local host applies the same, so a
slow or oversized client cannot hold it any more than it could hold Azure.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_REQUEST_BYTES = 104_857_600
"""The Functions front end's request length limit (100 MB)."""
MAX_URL_BYTES = 4096
MAX_HEADER_BYTES = 32 * 1024
LINGER_SECONDS = 2.0
"""How long a connection refused for its head is still read (and dropped) before it closes."""
"""Kestrel's MaxRequestHeadersTotalSize: names and values of all request headers together."""
MAX_READ_BODY_BYTES = 64 * 1024
"""GET, HEAD and OPTIONS carry no body any function here reads: a large one is refused."""
HEADERS_TIMEOUT_SECONDS = 30.0
"""Kestrel's RequestHeadersTimeout."""
BODY_GRACE_SECONDS = 5.0
BODY_MIN_BYTES_PER_SECOND = 240.0
"""Kestrel's MinRequestBodyDataRate: 240 bytes/s after a 5 s grace period (the local host's
``--body-grace`` sets another grace)."""


class LimitExceeded(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class HttpLimits:
    max_outstanding: int | None = 200
    max_concurrent: int | None = 100
    body_grace: float = BODY_GRACE_SECONDS

    @classmethod
    def from_host_json(cls, host: Mapping[str, Any], body_grace: float = BODY_GRACE_SECONDS) -> HttpLimits:
        """The limits host.json sets; Kestrel's body grace is no host.json setting."""
        http = host.get("extensions", {}).get("http", {})

        def bound(name: str, default: int) -> int | None:
            value = int(http.get(name, default))
            return None if value < 0 else value  # -1 means unbounded, as in host.json

        return cls(bound("maxOutstandingRequests", 200), bound("maxConcurrentRequests", 100), body_grace)


def check_url(request: Request) -> None:
    """414 for a URL over the front end's limit; 400 for a control character (a tab, CR or LF,
    sent percent-encoded) in the path, which no route or name of this app contains: it must
    never reach a route as part of a name, nor be cut off as a line end."""
    path = request.scope["path"]  # decoded, as sent: request.url.path drops tabs and line ends
    size = len(path) + len(request.url.query) + 1
    if size > MAX_URL_BYTES:
        raise LimitExceeded(414, "uri_too_long", f"the URL is {size} bytes; the maximum is {MAX_URL_BYTES}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise LimitExceeded(400, "bad_request", "the path holds a control character (a tab, CR, LF, ...)")


async def read_body(request: Request, read_only: bool, grace: float = BODY_GRACE_SECONDS) -> bytes:
    """The body, refused as soon as it is known to be too large or to arrive too slowly: under
    BODY_MIN_BYTES_PER_SECOND once ``grace`` seconds have passed."""
    limit = MAX_READ_BODY_BYTES if read_only else MAX_REQUEST_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks: list[bytes] = []
    received = 0
    started = time.monotonic()
    stream = request.stream().__aiter__()
    while True:
        elapsed = time.monotonic() - started
        # The time by which the bytes so far (and one more) satisfy the minimum rate.
        due = max(grace, (received + 1) / BODY_MIN_BYTES_PER_SECOND) - elapsed
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), timeout=max(due, 0.1))
        except StopAsyncIteration:
            return b"".join(chunks)
        except asyncio.TimeoutError:
            raise LimitExceeded(
                408,
                "request_timeout",
                f"the request body arrived at under {BODY_MIN_BYTES_PER_SECOND:.0f} bytes/s",
            ) from None
        received += len(chunk)
        if received > limit:
            raise _too_large(received, limit)
        chunks.append(chunk)


def _too_large(size: int, limit: int) -> LimitExceeded:
    return LimitExceeded(
        413, "too_large", f"the request body is {size} bytes or more; the maximum is {limit}"
    )


class HeadersTooLarge(Exception):
    """Raised from a parser callback: the request's headers are over MAX_HEADER_BYTES."""


_TOO_LARGE_BODY = json.dumps(
    {
        "error": "header_too_large",
        "message": f"the request headers are over {MAX_HEADER_BYTES} bytes together",
    }
).encode()


class HeadersTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with Kestrel's header limits: a connection that does not finish
    a request's headers within 30 s of opening (or of the request's first byte) is closed, and
    headers over MAX_HEADER_BYTES together get a 431 before the app sees the request. (uvicorn
    has neither: its keep-alive timeout only covers idle gaps, and httptools takes headers of
    any size.)"""

    _headers_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0
    """Bytes of the current request's headers (names and values), as the parser reports them."""
    _raw_head_bytes = 0
    """Bytes received while the parser has not finished the current request's headers: a
    single header is reported only once whole, so this refuses a huge one as it arrives."""
    _head_tail = b""
    """The last bytes of the head received so far: the blank line may straddle two reads."""
    _in_head = True
    _too_large = False
    _discarding = False
    """After a 431: what the client still sends is read and dropped until the connection closes."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._in_head:
            # Up to the blank line that ends the head, if it is in sight (it may straddle two
            # reads): the bytes after it are the body, which is not the head's to count.
            seen = self._head_tail + data
            if seen.find(b"\r\n\r\n") < 0:
                self._raw_head_bytes += len(data)
                self._head_tail = seen[-3:]
                if self._raw_head_bytes > MAX_HEADER_BYTES + MAX_URL_BYTES + 1024:
                    self._refuse_headers()
                    return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._in_head = True
        self._arm()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4  # ": " and CRLF, as Kestrel counts
        if self._head_bytes > MAX_HEADER_BYTES:
            self._too_large = True
            raise HeadersTooLarge  # the parser stops; uvicorn answers via send_400_response
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_head = False
        self._raw_head_bytes = 0
        self._head_tail = b""
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._refuse_headers()
        else:
            super().send_400_response(msg)

    def _refuse_headers(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
            )
            # A lingering close, as HTTP servers do: closing a socket with unread bytes makes the
            # kernel send a reset, which can reach the client before it has read the 431. So
            # the answer ends with a FIN, the rest of the head is read and dropped, and the
            # connection closes once the client does or LINGER_SECONDS have passed.
            self._discarding = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._headers_timer is None:
            self._headers_timer = self.loop.call_later(HEADERS_TIMEOUT_SECONDS, self._expire)

    def _disarm(self) -> None:
        if self._headers_timer is not None:
            self._headers_timer.cancel()
            self._headers_timer = None

    def _expire(self) -> None:
        self._headers_timer = None
        if not self.transport.is_closing():
            self.transport.close()
