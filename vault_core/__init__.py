"""Message Vault's core: the log format, the stream writer and reader, and the storage adapters."""

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml and the API (``/health``, OpenAPI) read it."""
