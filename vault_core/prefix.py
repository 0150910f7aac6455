"""What every frame of a log shares, whatever its version (docs/FORMAT.md §9, §11.1).

A log holds version 1 records (:mod:`vault_core.recordformat`) and version 2 units
(:mod:`vault_core.unitformat`). Both begin with the same 9-byte prefix (``magic``, ``crc``,
``version``) and share the flag bits and the limits on keys and values defined here, so that
neither format module depends on the other for them.
"""

from __future__ import annotations

MAGIC = b"\xf5MVL"
"""Sync marker. 0xF5 never occurs in UTF-8 text, so JSON and text values cannot mimic it."""
UNIT_VERSION = 2
"""The version byte of a version 2 unit; 1 is a record's."""

# the fixed prefix (docs/FORMAT.md §9): these positions hold in every version
MAGIC_OFFSET = 0
CRC_OFFSET = MAGIC_OFFSET + 4
VERSION_OFFSET = CRC_OFFSET + 4
PREFIX_SIZE = VERSION_OFFSET + 1  # 9: what a reader reads to find a frame and tell its version
CRC_COVERAGE_START = VERSION_OFFSET
"""The crc covers every byte from ``version`` to the frame's end: magic is compared as it is,
and the crc cannot cover itself."""

# flags
FLAG_COMPRESSION_MASK = 0b0000_0111
"""Compression codec: none (0) in a record; a unit's codec (docs/FORMAT.md §11.4)."""
FLAG_KEY_IS_TEXT = 0b0000_1000
"""The key is UTF-8 text (readers return it as a string)."""

# limits
MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 1024 * 1024
