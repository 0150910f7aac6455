"""The compression codecs of record format version 2 (docs/FORMAT.md §11.4): ids, names and
the well-kept libraries that implement them (``zstandard``, ``lz4``). Pure: bytes in, bytes out.

Decompression is bounded by the length the unit header declares, checked *before* any buffer
of that size is allocated: a zstd frame names its content size, and a frame that names another
size (or none) is refused; an LZ4 block is decoded into a buffer of exactly the declared size.
So a decompression bomb costs at most the unit's declared length, which the caller has already
checked against the format's limit.
"""

from __future__ import annotations

import threading

import lz4.block
import zstandard

CODEC_NONE = 0
CODEC_ZSTD = 1
CODEC_LZ4 = 2
CODECS = {"none": CODEC_NONE, "zstd": CODEC_ZSTD, "lz4": CODEC_LZ4}
"""Setting value → codec id (the id is bits 0-2 of a v2 unit's ``flags``)."""
CODEC_NAMES = {v: k for k, v in CODECS.items()}
DEFAULT_CODEC = "zstd"
ZSTD_LEVEL = 3
"""zstd's own default level: the measured balance of size and writer CPU (BENCHMARKS.md)."""


_local = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor: one is not thread-safe, and making one per unit costs ~13 µs,
    a tenth of decompressing a 256 KiB unit. It keeps no state from one frame to the next."""
    try:
        return _local.zstd  # type: ignore[no-any-return]
    except AttributeError:
        _local.zstd = zstandard.ZstdDecompressor()
        return _local.zstd  # type: ignore[no-any-return]


class DecompressionFailed(ValueError):
    """Stored bytes that do not decompress to exactly the declared length."""


def codec_id(name: str) -> int:
    """The id of a codec named in a setting; ValueError names the choices."""
    try:
        return CODECS[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; choose one of {', '.join(CODECS)}") from None


def compress(codec: int, data: bytes, *, level: int = ZSTD_LEVEL) -> bytes:
    """``data`` compressed by ``codec`` (one zstd frame that names its size, at ``level``, or one
    LZ4 block)."""
    if codec == CODEC_ZSTD:
        # A compressor is not thread-safe and costs ~20 µs to make: one per unit is cheap enough.
        return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)
    if codec == CODEC_LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    if codec == CODEC_NONE:
        return data
    raise ValueError(f"unknown codec id {codec}")


def decompress(codec: int, stored: bytes | memoryview, length: int) -> bytes:
    """The ``length`` bytes ``stored`` decompresses to; DecompressionFailed if it is anything else.

    Never allocates more than ``length`` bytes for the result, whatever ``stored`` claims.
    """
    try:
        if codec == CODEC_ZSTD:
            claimed = zstandard.frame_content_size(stored)
            if claimed != length:
                raise DecompressionFailed(f"zstd frame declares {claimed} bytes, the unit {length}")
            # exactly one frame: bytes after it (another frame, or anything) are refused, not ignored
            out = _zstd_decompressor().decompress(stored, max_output_size=length, allow_extra_data=False)
        elif codec == CODEC_LZ4:
            out = lz4.block.decompress(stored, uncompressed_size=length)
        elif codec == CODEC_NONE:
            out = bytes(stored)
        else:
            raise ValueError(f"unknown codec id {codec}")
    except (zstandard.ZstdError, lz4.block.LZ4BlockError) as exc:
        raise DecompressionFailed(f"{CODEC_NAMES[codec]}: {exc}") from None
    if len(out) != length:
        raise DecompressionFailed(f"decompressed to {len(out)} bytes, the unit declares {length}")
    return out
