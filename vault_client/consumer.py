"""The consumer: iterate a stream from an offset, a time, the beginning or the end, optionally forever.

::

    with Consumer.connect(url, "orders", start="beginning", follow=True) as consumer:
        for message in consumer:
            handle(message)

Both read paths (HTTP API, or the blob with a SAS: ``direct=True``) yield the same
:class:`vault_core.recordformat.Message` objects. Iteration first catches up to the committed end
as fast as the path allows, then (with ``follow``) chases the tail with long polls.

With a consumer ``group`` the start position is the group's checkpoint when it has one
(``start``/``at`` apply only to a group's first run). :meth:`commit` records the position
after the last message handed out; with ``auto_commit`` that happens every
``commit_interval`` seconds while iterating and on :meth:`close`, but never when the
``with`` block ends with an exception, so a message being processed when the consumer died
is delivered again (at-least-once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

from vault_client import direct as direct_pages
from vault_client.api import ApiClient
from vault_client.auth import TokenCredential
from vault_client.direct import AccessProvider, DirectSource
from vault_client.groups import GroupMember
from vault_client.sources import ApiSource, Source
from vault_client.wire import to_millis
from vault_core.checkpoints import Checkpoint, CheckpointStore
from vault_core.errors import InvalidInput, StreamNotFound
from vault_core.limits import DEFAULT_READ_BYTES, DEFAULT_READ_MESSAGES, MAX_WAIT_SECONDS
from vault_core.reader import ReadResult
from vault_core.recordformat import Message

Start = int | Literal["beginning", "end"]


class Consumer:
    def __init__(
        self,
        source: Source,
        *,
        start: Start = "beginning",
        at: int | str | datetime | None = None,
        follow: bool = False,
        wait: float = 20.0,
        group: str | None = None,
        checkpoints: CheckpointStore | None = None,
        member: str | None = None,
        auto_commit: bool = True,
        commit_interval: float = 5.0,
    ) -> None:
        """Read ``source`` from ``start`` (an offset, ``"beginning"`` or ``"end"``) or time ``at``.

        ``wait`` (0-MAX_WAIT_SECONDS s) is how long one request waits for new data when following.
        """
        if isinstance(start, bool) or not (isinstance(start, int) or start in ("beginning", "end")):
            raise InvalidInput(f'start must be an offset, "beginning" or "end", not {start!r}')
        if isinstance(start, int) and start < 0:
            raise InvalidInput(f"start offset must be >= 0, got {start}")
        if at is not None and start != "beginning":
            raise InvalidInput("give a start offset or a time (at), not both")
        if group is not None and checkpoints is None:
            raise InvalidInput("a consumer group needs a checkpoint store (checkpoints=CheckpointStore...)")
        if not 0 <= wait <= MAX_WAIT_SECONDS:
            raise InvalidInput(f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
        self.source = source
        self.start = start
        self.at_ms = None if at is None else to_millis(at)
        self.follow = follow
        self.wait = wait
        self.member = (
            GroupMember(checkpoints, group, source.stream, member)
            if group is not None and checkpoints is not None
            else None
        )
        self.auto_commit = auto_commit
        self.commit_interval = commit_interval
        self._position: int | None = None
        self._committed_position: int | None = None
        self._last_commit = time.monotonic()
        self._stop = threading.Event()
        self._owned: list[Any] = []

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        url: str | None,
        stream: str,
        *,
        key: str | None = None,
        token: str | None = None,
        credential: TokenCredential | None = None,
        scope: str | None = None,
        direct: bool = False,
        api: ApiClient | None = None,
        page_size: int | None = None,
        max_bytes: int | None = None,
        **options: Any,
    ) -> Consumer:
        """A consumer of the vault at ``url``; ``direct`` reads the blob with the SAS the API hands out.

        Credentials as for :class:`ApiClient`: ``key``, ``token``, or ``credential`` + ``scope``."""
        owned = api is None
        if api is None:
            if url is None:
                raise InvalidInput("give the vault's url or an ApiClient")
            api = ApiClient(url, key, token=token, credential=credential, scope=scope)
        seeker = ApiSource(api, stream)
        source: Source
        if direct:
            access_api = api
            source = DirectSource(
                stream,
                lambda: access_api.access(stream),
                seek=seeker.seek_time,
                page_size=page_size or direct_pages.PAGE_MESSAGES,
                max_bytes=max_bytes or direct_pages.PAGE_BYTES,
            )
        else:
            source = ApiSource(
                api,
                stream,
                page_size=page_size or DEFAULT_READ_MESSAGES,
                max_bytes=max_bytes or DEFAULT_READ_BYTES,
            )
        consumer = cls(source, **options)
        if owned:
            consumer._owned.append(api)
        return consumer

    @classmethod
    def direct(cls, stream: str, access: AccessProvider, **options: Any) -> Consumer:
        """A consumer that needs no API at all: ``access()`` returns a SAS for the stream's blob."""
        return cls(DirectSource(stream, access), **options)

    # -- position ----------------------------------------------------------------------------
    @property
    def stream(self) -> str:
        return self.source.stream

    @property
    def position(self) -> int | None:
        """The next offset this consumer reads: after the last message handed out (None before reading)."""
        return self._position

    def seek(self, offset: int) -> None:
        """Continue from ``offset`` (a record boundary) on the next read."""
        if offset < 0:
            raise InvalidInput(f"offset must be >= 0, got {offset}")
        self._position = offset

    def _resolve(self) -> int:
        if self._position is not None:
            return self._position
        offset: int | None = None
        if self.member is not None:
            offset = self.member.load()
            self._committed_position = offset
        if offset is None:
            if self.at_ms is not None:
                offset = self.source.seek_time(self.at_ms)
            elif self.start == "end":
                offset = self._committed_or_zero()
            elif self.start == "beginning":
                offset = 0
            else:
                offset = int(self.start)
        self._position = offset
        return offset

    def _committed_or_zero(self) -> int:
        try:
            return self.source.committed()
        except StreamNotFound:
            if not self.follow:
                raise
            return 0  # following a stream that does not exist yet: it starts at 0

    # -- reading -------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Message]:
        offset = self._resolve()
        end = self._committed_or_zero()
        if offset < end:
            for m in self.source.scan(offset, end):
                if not self._hand_out(m):
                    return
                yield m
        while self.follow and not self._stop.is_set():
            page = self._page(self.wait)
            for m in page.messages:
                if not self._hand_out(m):
                    return
                yield m
            self._maybe_commit()

    def _hand_out(self, m: Message) -> bool:
        # Runs when the caller asks for the next message: the previous one is processed.
        self._maybe_commit()
        if self._stop.is_set():
            return False
        self._position = m.next_offset
        return True

    def poll(self, wait: float | None = None) -> list[Message]:
        """One page from the current position (waiting up to ``wait`` s for data); advances past it."""
        page = self._page(self.wait if wait is None else wait)
        if page.messages:
            self._position = page.next_offset
        self._maybe_commit()
        return page.messages

    def _page(self, wait: float) -> ReadResult:
        offset = self._resolve()
        try:
            return self.source.read(offset, wait)
        except StreamNotFound:
            if not self.follow:
                raise
            # The stream does not exist yet: no long poll to wait in, so wait here.
            self._stop.wait(min(max(wait, 0.05), 1.0))
            return ReadResult([], offset, 0)

    def stop(self) -> None:
        """End iteration (from any thread) after the current message or long poll."""
        self._stop.set()

    # -- checkpoints ---------------------------------------------------------------------------
    def commit(self, offset: int | None = None) -> Checkpoint:
        """Record ``offset`` (default: the position) as the group's checkpoint; raises CheckpointConflict."""
        if self.member is None:
            raise InvalidInput("commit() needs a consumer group (group=..., checkpoints=...)")
        target = self._resolve() if offset is None else offset
        checkpoint = self.member.commit(target)
        self._committed_position = target
        self._last_commit = time.monotonic()
        return checkpoint

    def _maybe_commit(self) -> None:
        if (
            self.member is not None
            and self.auto_commit
            and self._position is not None
            and self._position != self._committed_position
            and time.monotonic() - self._last_commit >= self.commit_interval
        ):
            self.commit()

    def close(self, commit: bool | None = None) -> None:
        """Commit the position (when auto-committing, or if ``commit``) and release connections."""
        try:
            wanted = self.auto_commit if commit is None else commit
            if (
                wanted
                and self.member is not None
                and self._position is not None
                and self._position != self._committed_position
            ):
                self.commit()
        finally:
            self.source.close()
            for resource in self._owned:
                resource.close()
            self._owned = []

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(commit=False if e is not None else None)
