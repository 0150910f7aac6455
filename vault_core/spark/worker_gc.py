"""Keep PySpark's per-task garbage collection from walking every imported module's objects.

PySpark's daemon runs each task (and each planning call) in a reused, forked Python worker and
calls ``gc.collect()`` after every one. A worker that has imported this package holds ~80,000
objects that live as long as it does (pyspark, pyarrow, the Azure SDK, our modules), and a full
collection walks all of them: 54-71 ms of CPU each, measured in a worker on this project's
shared benchmark machine, paid after every task and planning call of a query, more than decoding
100,000 format 2 rows. :func:`freeze_imported_objects` moves what exists at a worker's first call into
the collector's permanent generation (``gc.freeze``), so the collections after each task walk
only what that task left behind.

Only in a daemon-forked worker (``python -m pyspark.daemon``): elsewhere, in a driver, a test
process or a simple worker, there is no collection per task to save and the process is not ours.
"""

from __future__ import annotations

import gc
import os
import sys

_frozen_in: int | None = None
"""The process that froze its objects (a worker forked after it must freeze its own)."""


def freeze_imported_objects() -> bool:
    """In a PySpark daemon worker, once per process: collect, then freeze what survives.

    The collection first, so that no garbage is frozen with the live objects (a frozen cycle is
    never collected). Objects frozen here that die later are still freed by reference counting.
    True if this call froze.
    """
    global _frozen_in
    if _frozen_in == os.getpid() or not _in_daemon_worker():
        return False
    _frozen_in = os.getpid()
    gc.collect()
    gc.freeze()
    return True


def _in_daemon_worker() -> bool:
    """Whether this process is a worker forked by ``python -m pyspark.daemon`` (its ``__main__``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon"
