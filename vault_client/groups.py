"""Consumer groups on the client side: one member's checkpoint, and each group's lag.

A member reads the group's checkpoint once (remembering its ETag) and every commit is
conditional on that ETag (:mod:`vault_core.checkpoints`). So when two members of a group
read the same stream, the second one to commit gets :class:`CheckpointConflict` instead
of silently rewinding or skipping the other's work; it can :meth:`GroupMember.reload`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from vault_core.checkpoints import Checkpoint, CheckpointStore
from vault_core.errors import StreamNotFound
from vault_core.names import validate_group_name


def default_member_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}"


class GroupMember:
    """One consumer's handle on the checkpoint of (group, stream)."""

    def __init__(self, store: CheckpointStore, group: str, stream: str, member: str | None = None) -> None:
        self.store = store
        self.group = validate_group_name(group)
        self.stream = stream
        self.member = member or default_member_name()
        self.checkpoint: Checkpoint | None = None
        self._loaded = False

    def load(self) -> int | None:
        """The group's committed offset (None if it never committed); remembers its ETag."""
        self.checkpoint = self.store.get(self.group, self.stream)
        self._loaded = True
        return self.checkpoint.offset if self.checkpoint else None

    reload = load

    def commit(self, offset: int) -> Checkpoint:
        """Record ``offset`` as the group's position; raises CheckpointConflict if another member moved it."""
        if not self._loaded:
            self.load()
        etag = self.checkpoint.etag if self.checkpoint else None
        self.checkpoint = self.store.save(
            self.group, self.stream, offset, etag=etag, now_ms=time.time_ns() // 1_000_000, member=self.member
        )
        return self.checkpoint


@dataclass(frozen=True)
class GroupLag:
    group: str
    stream: str
    offset: int
    """The group's checkpoint."""
    committed: int | None
    """The stream's committed length (None: the stream no longer exists)."""
    member: str | None
    updated: int

    @property
    def lag(self) -> int | None:
        """Bytes committed to the stream that the group has not consumed yet."""
        return None if self.committed is None else max(0, self.committed - self.offset)


def group_lag(
    store: CheckpointStore, committed_of: Callable[[str], int], group: str | None = None
) -> list[GroupLag]:
    """Lag of every checkpoint (or one group's): the stream's committed length minus the checkpoint."""
    lengths: dict[str, int | None] = {}
    out = []
    for cp in store.list(group):
        if cp.stream not in lengths:  # one length lookup per stream, however many groups read it
            try:
                lengths[cp.stream] = committed_of(cp.stream)
            except StreamNotFound:
                lengths[cp.stream] = None
        out.append(GroupLag(cp.group, cp.stream, cp.offset, lengths[cp.stream], cp.member, cp.updated))
    return out
