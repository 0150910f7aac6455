"""The drained messages a queue's owner holds, written down where its successor on the same
instance finds them (docs/ARCHITECTURE.md §3.7).

A writer invocation keeps the messages it drained invisible (``DRAIN_VISIBILITY``, renewed) while
it appends them. If its process dies they come back only when that visibility runs out, since
changing a message's visibility takes its current pop receipt, which only the holder knows. So
the holder keeps the ids and receipts of what it holds in a file of its instance's (next to the
queue's lock file), rewritten whenever the set or a receipt changes; the process that takes the
queue over next on the same instance (it holds the queue's lock, so the writer is gone) makes
them visible at once, and its first drain takes them. A receipt that changed after the file was
written (the holder died mid-renewal) or a message already deleted is refused by the queue and
skipped: that message comes back when its visibility runs out, as before. Nothing is lost or
duplicated either way: batch ids make a redelivery a duplicate (§3.5).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vault_core.errors import VaultError
from vault_core.queueing import MessageQueue, QueuedMessage

log = logging.getLogger("vault_app.writer")

RETURN_THREADS = 8
"""Messages a successor makes visible again at once (one request each)."""


class DrainedFile:
    """The ids and pop receipts of the messages an invocation holds (``path`` None: not kept)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def record(self, messages: Iterable[QueuedMessage]) -> None:
        """Write down exactly these messages (none: remove the file). Atomic: a reader sees the
        old list or the new one."""
        if self.path is None:
            return
        held = [{"id": m.id, "receipt": m.receipt} for m in messages]
        try:
            if not held:
                self.path.unlink(missing_ok=True)
                return
            scratch = self.path.with_suffix(".tmp")
            scratch.write_text(json.dumps(held))
            os.replace(scratch, self.path)
        except OSError as exc:  # only a successor's head start is lost: keep writing the stream
            log.warning("could not write down the drained messages in %s: %s", self.path, exc)

    def take(self) -> list[QueuedMessage]:
        """What a process that died left written down, and the file removed."""
        if self.path is None:
            return []
        try:
            held = json.loads(self.path.read_text())
            self.path.unlink(missing_ok=True)
        except (OSError, ValueError):  # none written, or unreadable: they come back by themselves
            return []
        return [QueuedMessage(str(m["id"]), "", str(m["receipt"])) for m in held]

    def return_to(self, queue: MessageQueue) -> int:
        """Make what a dead holder left visible again at once; how many the queue took back.

        One request per message, side by side: a takeover waits for the slowest, not for all of
        them one after the other (a dead owner may have held a whole drain, 32 and more)."""
        held = self.take()
        if not held:
            return 0
        with ThreadPoolExecutor(min(RETURN_THREADS, len(held)), thread_name_prefix="mv-return") as pool:
            return sum(pool.map(lambda m: _make_visible(queue, m), held))


def _make_visible(queue: MessageQueue, m: QueuedMessage) -> bool:
    try:
        queue.hide(m, 0)
        return True
    except VaultError:  # deleted meanwhile, or a newer receipt: it comes back by itself
        return False
