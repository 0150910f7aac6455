"""Reading Message Vault streams with Apache Spark (see ``docs/SPARK.md``).

- :func:`register` — the Spark 4 data source ``messagevault`` (batch and Structured Streaming).
- :func:`read_streams` — the same DataFrame on Spark 3.4/3.5, without the data source API.
- ``python -m vault_core.spark.capture`` — incremental, idempotent copy to Parquet.

Needs ``pyspark`` and ``pyarrow`` (the ``spark`` extra); ``import vault_core`` does not.
Names are imported lazily so that ``vault_core.spark.plan`` stays usable without Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vault_core.spark.datasource import MessageVaultDataSource, register
    from vault_core.spark.legacy import read_streams

__all__ = ["MessageVaultDataSource", "read_streams", "register"]


def __getattr__(name: str) -> Any:
    if name in ("MessageVaultDataSource", "register"):
        from vault_core.spark import datasource

        return getattr(datasource, name)
    if name == "read_streams":
        from vault_core.spark.legacy import read_streams

        return read_streams
    raise AttributeError(f"module 'vault_core.spark' has no attribute {name!r}")
