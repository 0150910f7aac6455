"""The limits of the vault's HTTP API, each stated once.

The handlers (:mod:`vault_app.api`, :mod:`vault_app.config`), the OpenAPI description, the client
and its command line all import them from here, and ``tests/test_docs.py`` checks that
docs/API.md says the same numbers. The record format's own limits (key and value sizes) live
in :mod:`vault_core.recordformat`; the ones here are about requests and answers.
"""

from __future__ import annotations

from vault_core import recordformat

MiB = 1024 * 1024

# -- produce (defaults of the VAULT_MAX_* settings) --------------------------------------------
MAX_MESSAGE_BYTES = recordformat.MAX_VALUE_BYTES
"""Largest value of one message: the default of ``VAULT_MAX_MESSAGE_BYTES``, which cannot go
above what a record can hold."""
MAX_BATCH_MESSAGES = 10_000
"""Most messages in one POST: the default of ``VAULT_MAX_BATCH_MESSAGES``."""
MAX_BATCH_BYTES = 16 * MiB
"""Largest POST body: the default of ``VAULT_MAX_BATCH_BYTES``."""

# -- consume -----------------------------------------------------------------------------------
DEFAULT_READ_MESSAGES = 1000
"""Messages per read (``limit``) when the caller does not say."""
MAX_READ_MESSAGES = 10_000
"""Largest ``limit`` of one read."""
DEFAULT_READ_BYTES = 1 * MiB
"""Bytes per read (``max_bytes``) when the caller does not say."""
MAX_READ_BYTES = 16 * MiB
"""Largest ``max_bytes`` of one read, and the most bytes one raw log answer carries."""

# -- both --------------------------------------------------------------------------------------
MAX_WAIT_SECONDS = 60
"""Longest ``?wait=`` of a POST (for the commit) or a read (for new data)."""

# -- the explorer's read routes ------------------------------------------------------------------
MAX_RATE_MINUTES = 1440
"""A day of minutes: one Tables query of at most 1,441 rows."""
MAX_GROUPS = 200
"""Groups listed per stream; each one's time lag costs a read of the record at its position."""
