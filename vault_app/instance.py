"""Which instance this process runs on, and the locks the processes of one instance share: what
lets a worker's replacement take over its leases at once (docs/ARCHITECTURE.md §3.7).

An Azure Functions instance runs the app in one or more language worker processes
(``FUNCTIONS_WORKER_PROCESS_COUNT``) and replaces one that dies. A blob lease taken under an id
of the process's own outlives a killed process by up to the lease's 15 s. Taken under an id of
the *instance's* own, it can be taken again at once by whichever process of the instance asks
next, since taking a lease under the id that holds it succeeds. Two live processes of one
instance must then never both act on it, so every such lease is paired with an exclusive lock
on a file in a directory the instance's processes share: an OS file lock (``flock``), which the
kernel drops when its process dies, SIGKILL included. So:

- across instances, the blob lease excludes (their lease ids differ);
- within an instance, the file lock excludes live processes, and a dead process holds none;
- a process with no instance id (no platform setting, no ``fcntl``) is an instance of its own:
  a lease id of its own and no file locks, so its leases run out as before.

Whatever the locks do, every write to a stream also carries ``If-Match`` its last ETag
(vault_core.writer): two writers under the same id could make each other fail, but never both
write from the same state.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; each process is its own instance
    fcntl = None  # type: ignore[assignment]

INSTANCE_ID_SETTING = "WEBSITE_INSTANCE_ID"
"""Set by the platform, not by us: the id of the instance the process runs on, unique per
instance. The local host sets it for its workers (vault_local.host). Nothing else is taken for
it: a name that two instances could share (a container's name, say) would give them one lease
id, and the file locks, which only one machine sees, could not keep them apart."""

_LEASE_IDS = uuid.UUID("7d0f5b52-0c55-4c8e-9a4e-2f3b8b6f1a10")
"""Namespace of the instances' lease ids (uuid5 of the instance id): blob lease ids are GUIDs."""


def instance_id(env: Mapping[str, str]) -> str | None:
    """The instance id the platform gives this process, if any."""
    return (env.get(INSTANCE_ID_SETTING) or "").strip() or None


def lock_directory(instance: str) -> Path:
    """Where the processes of ``instance`` keep their lock files (one directory per instance,
    so several local hosts on one machine stay separate instances)."""
    digest = hashlib.sha256(instance.encode()).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / "message-vault-instances" / digest


class HeldLock:
    """An exclusive lock on one lock file, held until :meth:`release` or the process's end."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


@dataclass(frozen=True)
class Instance:
    """This process's instance: the lease id its processes share, and their lock directory
    (None: the process is an instance of its own, and needs no locks)."""

    lease_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    locks: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Instance:
        ident = instance_id(env)
        if ident is None or fcntl is None:
            return cls()
        locks = lock_directory(ident)
        try:
            locks.mkdir(parents=True, exist_ok=True)
        except OSError:  # nowhere to keep the locks: no shared lease id either
            return cls()
        return cls(str(uuid.uuid5(_LEASE_IDS, ident)), locks)

    @property
    def shared(self) -> bool:
        """Do other processes share this instance's lease id (so leases need the file lock)?"""
        return self.locks is not None

    def path(self, name: str, suffix: str) -> Path | None:
        """A file of the instance's processes about ``name`` (None: the process is on its own)."""
        if self.locks is None:
            return None
        self.locks.mkdir(parents=True, exist_ok=True)
        return self.locks / (hashlib.sha256(name.encode()).hexdigest()[:32] + suffix)

    def try_lock(self, name: str) -> HeldLock | None:
        """The instance-wide lock ``name``, or None while another live process holds it.

        With no lock directory, always granted: no other process shares the lease id."""
        path = self.path(name, ".lock")
        if path is None:
            return HeldLock(None)
        # Lock files are never deleted: deleting one while another process opens it would let
        # two processes lock two different files of the same name.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return HeldLock(fd)
