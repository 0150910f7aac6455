"""A reverse proxy in front of one Azurite service that fails chosen requests: a real storage fault.

Requests go through unchanged (Shared Key signatures do not cover the host) unless ``rule``
returns a status for them; then the proxy answers that status itself with the error body a
busy Azure service sends, and the request never reaches storage.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Rule = Callable[[str, str], "int | None"]
"""(method, path with query) -> a status to answer instead of forwarding, :data:`DROP`, or None."""
DROP = 0
"""What a rule returns to close the connection without answering: as a server does when it
closes an idle keep-alive connection just as the client reuses it."""
CUT = -1
"""What a rule returns to forward the request but break the answer off halfway through its body
(the full Content-Length announced, half the bytes sent, the connection closed)."""

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.rule: Rule | None = None
        self.failed: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = proxy.rule(self.command, self.path) if proxy.rule else None
                if status is not None and status != CUT:
                    proxy.failed.append((self.command, self.path))
                    if status == DROP:
                        self.close_connection = True
                        return None
                    return self._answer(
                        status,
                        b'<?xml version="1.0"?><Error><Code>ServerBusy</Code>'
                        b"<Message>injected by the fault proxy</Message></Error>",
                    )
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.target_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                resp = upstream.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                head = self.command == "HEAD"  # keeps the real Content-Length, sends no body
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP_BY_HOP and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if status == CUT:
                    proxy.failed.append((self.command, self.path))
                    data, self.close_connection = data[: len(data) // 2], True
                self.wfile.write(data)
                upstream.close()

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("x-ms-error-code", "ServerBusy")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_MERGE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
