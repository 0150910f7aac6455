"""The local host's channel to a language worker: frames over one end of a socketpair.

The Functions host talks gRPC to its language workers; the local host sends the same few
messages (an invocation, its result, a log record, "terminate") as frames of a fixed header,
a small pickled dict and the body as raw bytes (sent from, and received into, one ``bytes``
object: HTTP bodies reach 16 MiB).
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from collections.abc import Mapping
from typing import Any

# Frame kinds. Host → worker: HTTP, QUEUE, TERMINATE. Worker → host: READY, RESULT, LOG.
READY, HTTP, QUEUE, RESULT, LOG, TERMINATE = 1, 2, 3, 4, 5, 6
CLOSE_WRITERS_TIMEOUT = 4.0
"""Seconds a worker told to TERMINATE gives the app's open writers to close (catalog row, lease
release) before it exits: bounded, so a storage outage cannot hold the host's shutdown; a lease
left behind expires. The host waits that long, and a little more, before it kills the worker."""
_HEADER = struct.Struct("!BQII")  # kind, invocation id, meta length, body length
_INLINE = 256 * 1024
"""Bodies below this go out in one send with their header; larger ones are sent as they are."""


class Channel:
    """Frames over one end of a socketpair: sent from any thread, received by one.

    The meta dict is pickled: both ends are this module, over a private socketpair.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, kind: int, ident: int, meta: Mapping[str, Any], body: bytes = b"") -> None:
        packed = pickle.dumps(dict(meta), protocol=pickle.HIGHEST_PROTOCOL)
        head = _HEADER.pack(kind, ident, len(packed), len(body))
        with self._send_lock:
            if len(body) < _INLINE:
                self.sock.sendall(head + packed + body)
            else:
                self.sock.sendall(head + packed)
                self.sock.sendall(body)  # straight from the caller's buffer, not copied

    def recv(self) -> tuple[int, int, dict[str, Any], bytes]:
        """The next frame; EOFError once the other end has closed."""
        kind, ident, meta_len, body_len = _HEADER.unpack(self._exact(_HEADER.size))
        meta: dict[str, Any] = pickle.loads(self._exact(meta_len))
        return kind, ident, meta, self._exact(body_len)

    def _exact(self, n: int) -> bytes:
        if n == 0:
            return b""
        # MSG_WAITALL fills one bytes object of the full size in one call (one copy, from the
        # kernel); the loop only runs if a signal cuts it short.
        data = self.sock.recv(n, socket.MSG_WAITALL)
        if len(data) == n:
            return data
        parts = [data]
        got = len(data)
        while data and got < n:
            data = self.sock.recv(n - got, socket.MSG_WAITALL)
            parts.append(data)
            got += len(data)
        if got < n:
            raise EOFError("the other end closed the channel")
        return b"".join(parts)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it
        except OSError:
            pass
        self.sock.close()
