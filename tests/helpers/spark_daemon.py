"""PySpark's daemon (``python -m pyspark.daemon MODULE``), with what its workers import alike imported first.

The daemon forks a worker for each task or planning call; the worker imports MODULE and what the
call needs (the Azure SDK, ~0.5 CPU-s, most of it), and is kept for the next call, unless the
call failed: then the next call's worker, a fresh fork, imports them again. The tests fail reads on
purpose (corrupt records, a missing stream, an offset inside a record), so imported once here,
before the forks, they cost a fork each instead. spark_python.sh runs this for the daemons.

Only modules that start no thread (so not pyarrow, nor pandas): a process that forks must have a
single thread, which is why PySpark's daemon imports its worker module after the fork; the check
below keeps it so.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys

PRELOAD = {
    "pyspark.worker": ("pyspark.worker", "vault_core.spark.connection"),
    "pyspark.sql.worker.plan_data_source_read": ("vault_core.spark.connection",),
}
"""What each kind of worker imports alike, by the worker module the daemon serves."""


def main() -> None:
    sys.path[0] = os.getcwd()  # as under ``python -m``: not this directory's helpers
    for module in PRELOAD.get(sys.argv[1] if len(sys.argv) > 1 else "", ()):
        importlib.import_module(module)
    threads = len(os.listdir("/proc/self/task"))  # native ones too (importing pyarrow starts one)
    assert threads == 1, f"preloading for {sys.argv[1:]} started {threads - 1} thread(s)"
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
