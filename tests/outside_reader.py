"""Independent reader for the Message Vault log format (docs/FORMAT.md, second edition).

Written from the specification alone.  Reads version 1 records (§2) and version 2 units
(§11) in any mix, with codecs none / zstd / lz4 (§11.4).  Corruption policy: *stop* (§7.4).

Only the Python standard library plus `zstandard` and `lz4` are used.

Why it is in the repository: FORMAT.md promises that a reader written from it alone reads every
stream the reference writer writes. An engineer who had not read vault_core wrote this one from
FORMAT.md (and listed what the spec left unclear, which FORMAT.md now says);
tests/test_outside_reader.py checks that it and vault_core read the writer's streams alike,
damaged ones included. It must never import vault_core: where the two disagree, the spec or
the code is wrong, and the test says which bytes.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
import zlib

import lz4.block
import zstandard

# ---------------------------------------------------------------- constants (§4, §11.4)

MAGIC = b"\xf5MVL"
RECORD_VERSION = 1
UNIT_VERSION = 2
HEADER_SIZE = 32
UNIT_HEADER_SIZE = 38
MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 1048576
MAX_PAYLOAD_BYTES = 4194304
KNOWN_FLAGS = 0x0F
CODEC_MASK = 0x07
FLAG_KEY_IS_TEXT = 0x08
CODEC_NONE, CODEC_ZSTD, CODEC_LZ4 = 0, 1, 2

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# record header: magic crc version flags key_length value_length offset timestamp
_REC = struct.Struct("<4sIBBHIQq")
# unit header: magic crc version flags count payload_length stored_length offset timestamp
_UNIT = struct.Struct("<4sIBBIIIQq")
assert _REC.size == HEADER_SIZE and _UNIT.size == UNIT_HEADER_SIZE


# ---------------------------------------------------------------- errors


class Corrupt(Exception):
    """The log is damaged or not what the spec allows; args[0] is a message, .offset the byte
    offset of the damaged record/unit (or None)."""

    def __init__(
        self,
        message: str,
        offset: int | None = None,
        *,
        stored_crc: int | None = None,
        computed_crc: int | None = None,
    ):
        super().__init__(message)
        self.offset = offset
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc
        # messages decoded (and valid) before the damage; read_log withholds them (§7.4 "stop"
        # MAY withhold), the CLI prints them before the error.
        self.delivered: list[dict] = []


class UnsupportedVersion(Corrupt):
    """§9: a frame version, codec or flag this reader does not implement.  The spec says this is
    *not* corruption; it subclasses Corrupt only because the requested API has a single error
    type for "the reader must refuse this log"."""


# ---------------------------------------------------------------- codecs (§11.4)


def _zstd_declared_size(stored: bytes, offset: int) -> int:
    """Parse the Zstandard frame header (RFC 8878 §3.1.1.1) and return Frame_Content_Size.
    Refuses a skippable frame, a reserved bit, a dictionary and a missing content size."""
    if len(stored) < 5 or stored[:4] != ZSTD_MAGIC:
        raise Corrupt("zstd: stored bytes do not start with a Zstandard frame", offset)
    fhd = stored[4]
    fcs_flag = fhd >> 6
    single_segment = (fhd >> 5) & 1
    reserved = (fhd >> 3) & 1
    dict_flag = fhd & 3
    if reserved:
        raise Corrupt("zstd: reserved bit set in frame header descriptor", offset)
    pos = 5
    if not single_segment:
        pos += 1  # Window_Descriptor
    did_size = (0, 1, 2, 4)[dict_flag]
    if len(stored) < pos + did_size:
        raise Corrupt("zstd: truncated frame header", offset)
    dict_id = int.from_bytes(stored[pos : pos + did_size], "little") if did_size else 0
    pos += did_size
    if dict_id != 0:
        raise Corrupt(f"zstd: frame needs dictionary {dict_id}", offset)
    if fcs_flag == 0 and not single_segment:
        raise Corrupt("zstd: frame does not declare its content size", offset)
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if len(stored) < pos + fcs_size:
        raise Corrupt("zstd: truncated frame header", offset)
    size = int.from_bytes(stored[pos : pos + fcs_size], "little")
    if fcs_size == 2:
        size += 256
    return size


def _decompress(codec: int, stored: bytes, payload_length: int, offset: int) -> bytes:
    """§11.5 step 7.  Never produces (or allocates for) more than payload_length bytes."""
    if codec == CODEC_NONE:
        return stored
    if codec == CODEC_ZSTD:
        declared = _zstd_declared_size(stored, offset)
        if declared != payload_length:
            raise Corrupt(
                f"zstd: frame declares {declared} bytes, unit header says payload_length {payload_length}",
                offset,
            )
        try:
            # The declared content size is checked above and enforced by libzstd while it
            # decodes (a frame producing more than it declared is an error), and the decoding
            # buffer is bounded by it, so at most payload_length bytes are ever held.
            dobj = zstandard.ZstdDecompressor().decompressobj()
            out = dobj.decompress(stored)
        except zstandard.ZstdError as exc:
            raise Corrupt(f"zstd: {exc}", offset) from None
        if not dobj.eof:
            raise Corrupt("zstd: frame is truncated", offset)
        if dobj.unused_data:
            raise Corrupt(f"zstd: {len(dobj.unused_data)} bytes after the frame", offset)
        if len(out) != payload_length:
            raise Corrupt(f"zstd: decoded {len(out)} bytes, expected {payload_length}", offset)
        return out
    if codec == CODEC_LZ4:
        try:
            # Allocates exactly payload_length for the output; LZ4_decompress_safe fails if the
            # block needs more room or does not end exactly at the end of its input.
            out = lz4.block.decompress(stored, uncompressed_size=payload_length)
        except Exception as exc:  # lz4.block.LZ4BlockError and friends
            raise Corrupt(f"lz4: {exc}", offset) from None
        if len(out) != payload_length:  # python-lz4 does not check a short result itself
            raise Corrupt(f"lz4: decoded {len(out)} bytes, expected {payload_length}", offset)
        return out
    raise AssertionError(codec)  # unreachable: flags checked by the caller


# ---------------------------------------------------------------- frame decoding (§7.2, §11.5)


def _decode_record(data: bytes, p: int, C: int) -> tuple[list[dict], int]:
    """§7.2 steps 4-7 for the record at p (at least 32 bytes remain).  Returns (messages, e)."""
    magic, crc, version, flags, klen, vlen, off, ts = _REC.unpack_from(data, p)
    if magic != MAGIC:
        raise Corrupt(f"no record starts here (magic {magic.hex()})", p)
    if version != RECORD_VERSION:  # cannot happen: the caller dispatched on version
        raise UnsupportedVersion(f"record format version {version} is not supported by this reader", p)
    if klen > MAX_KEY_BYTES or vlen > MAX_VALUE_BYTES:
        raise Corrupt(f"record lengths out of bounds (key {klen}, value {vlen})", p)
    if off != p:
        raise Corrupt(f"record claims offset {off} but sits at {p}", p)
    e = p + HEADER_SIZE + klen + vlen
    if e > C:
        raise Corrupt(f"record at {p} runs past the committed end ({e} > {C})", p)
    computed = zlib.crc32(memoryview(data)[p + 8 : e]) & 0xFFFFFFFF
    if computed != crc:
        raise Corrupt(
            f"checksum mismatch at {p}: stored crc 0x{crc:08X}, computed 0x{computed:08X}",
            p,
            stored_crc=crc,
            computed_crc=computed,
        )
    if flags & ~KNOWN_FLAGS or flags & CODEC_MASK != CODEC_NONE:
        raise UnsupportedVersion(
            f"record at {p} uses flags 0x{flags:02X} (codec "
            f"{flags & CODEC_MASK}) not supported by this reader",
            p,
        )
    k0 = p + HEADER_SIZE
    msg = {
        "offset": p,
        "timestamp": ts,
        "key": bytes(data[k0 : k0 + klen]),
        "key_is_text": bool(flags & FLAG_KEY_IS_TEXT),
        "value": bytes(data[k0 + klen : e]),
        "next_offset": e,
    }
    return [msg], e


def _decode_unit(data: bytes, p: int, C: int) -> tuple[list[dict], int]:
    """§11.5 steps 1-9 for the unit at p.  Returns (messages, e)."""
    # step 1
    if C - p < UNIT_HEADER_SIZE:
        raise Corrupt(f"a partial unit header at the committed end ({C - p} bytes at {p})", p)
    _magic, crc, _version, flags, count, plen, slen, off, ts = _UNIT.unpack_from(data, p)
    # step 3 (64-bit / unbounded arithmetic: Python ints)
    if count < 1:
        raise Corrupt(f"unit at {p} has count 0", p)
    if not (8 * (count + 1) <= plen <= MAX_PAYLOAD_BYTES):
        raise Corrupt(
            f"unit at {p}: payload_length {plen} impossible for count {count} (limit {MAX_PAYLOAD_BYTES})", p
        )
    if slen > plen:
        raise Corrupt(f"unit at {p}: stored_length {slen} > payload_length {plen}", p)
    if not (UNIT_HEADER_SIZE + slen > count):
        raise Corrupt(f"unit at {p} is not longer than its count ({38 + slen} <= {count})", p)
    # step 4
    if off != p:
        raise Corrupt(f"unit claims offset {off} but sits at {p}", p)
    # step 5
    e = p + UNIT_HEADER_SIZE + slen
    if e > C:
        raise Corrupt(f"unit at {p} runs past the committed end ({e} > {C})", p)
    # step 6
    computed = zlib.crc32(memoryview(data)[p + 8 : e]) & 0xFFFFFFFF
    if computed != crc:
        raise Corrupt(
            f"checksum mismatch at {p}: stored crc 0x{crc:08X}, computed 0x{computed:08X}",
            p,
            stored_crc=crc,
            computed_crc=computed,
        )
    codec = flags & CODEC_MASK
    if flags & ~KNOWN_FLAGS or codec not in (CODEC_NONE, CODEC_ZSTD, CODEC_LZ4):
        raise UnsupportedVersion(
            f"unit at {p} uses flags 0x{flags:02X} (codec {codec}) not supported by this reader", p
        )
    if codec == CODEC_NONE and slen != plen:
        raise Corrupt(f"unit at {p}: codec none but stored_length {slen} != payload_length {plen}", p)
    # step 7
    stored = bytes(data[p + UNIT_HEADER_SIZE : e])
    payload = _decompress(codec, stored, plen, p)
    # step 8 (§11.3)
    n = count
    ko = struct.unpack_from(f"<{n + 1}I", payload, 0)
    vo = struct.unpack_from(f"<{n + 1}I", payload, 4 * (n + 1))
    if ko[0] != 0 or vo[0] != 0:
        raise Corrupt(f"unit at {p}: offsets arrays do not start at 0", p)
    for i in range(n):
        kl = ko[i + 1] - ko[i]
        vl = vo[i + 1] - vo[i]
        if kl < 0 or vl < 0:
            raise Corrupt(f"unit at {p}: offsets decrease at message {i}", p)
        if kl > MAX_KEY_BYTES or vl > MAX_VALUE_BYTES:
            raise Corrupt(f"unit at {p}: message {i} exceeds limits (key {kl}, value {vl})", p)
    if plen != 8 * (n + 1) + ko[n] + vo[n]:
        raise Corrupt(f"unit at {p}: payload_length {plen} != 8*(n+1) + {ko[n]} + {vo[n]}", p)
    # step 9
    kbase = 8 * (n + 1)
    vbase = kbase + ko[n]
    text = bool(flags & FLAG_KEY_IS_TEXT)
    msgs = []
    for i in range(n):
        msgs.append(
            {
                "offset": p + i,
                "timestamp": ts,
                "key": bytes(payload[kbase + ko[i] : kbase + ko[i + 1]]),
                "key_is_text": text,
                "value": bytes(payload[vbase + vo[i] : vbase + vo[i + 1]]),
                "next_offset": p + i + 1 if i + 1 < n else e,
            }
        )
    return msgs, e


def _decode_frame(data: bytes, p: int, C: int) -> tuple[list[dict], int]:
    """§11.5 preamble: dispatch on the (unchecked) version byte."""
    if C - p < HEADER_SIZE:
        raise Corrupt(f"a partial header at the committed end ({C - p} bytes at {p})", p)
    if data[p : p + 4] != MAGIC:
        raise Corrupt(f"no record starts here (magic {bytes(data[p : p + 4]).hex()})", p)
    version = data[p + 8]
    if version == RECORD_VERSION:
        return _decode_record(data, p, C)
    if version == UNIT_VERSION:
        return _decode_unit(data, p, C)
    raise UnsupportedVersion(
        f"record format version {version} is not supported by this reader (offset {p})", p
    )


# ---------------------------------------------------------------- boundaries (§7.3, §11.6)


def _prove(data: bytes, X: int, C: int) -> int:
    """Prove that X is a readable message offset by walking frame headers from 0 (no index is
    available to this reader).  Returns the frame position at which decoding must start
    (X itself, or the position of the unit that holds message X).  Raises ValueError if X is
    not a boundary, UnsupportedVersion if the walk meets a frame it cannot measure."""
    if X == 0 or X == C:
        return X
    q = 0
    while True:
        # q < X here, q a frame position reached by the walk
        if C - q < HEADER_SIZE:
            raise ValueError(f"not a record boundary: {X} (the walk meets a partial header at {q})")
        if data[q : q + 4] != MAGIC:
            raise ValueError(f"not a record boundary: {X} (the walk meets no frame at {q})")
        version = data[q + 8]
        if version == RECORD_VERSION:
            _, _, _, _, klen, vlen, off, _ = _REC.unpack_from(data, q)
            if off != q:
                raise ValueError(f"not a record boundary: {X} (the frame at {q} claims offset {off})")
            nxt = q + HEADER_SIZE + klen + vlen
        elif version == UNIT_VERSION:
            if C - q < UNIT_HEADER_SIZE:
                raise ValueError(f"not a record boundary: {X} (the walk meets a partial unit header at {q})")
            _, _, _, _, count, _, slen, off, _ = _UNIT.unpack_from(data, q)
            if off != q:
                raise ValueError(f"not a record boundary: {X} (the frame at {q} claims offset {off})")
            if not (UNIT_HEADER_SIZE + slen > count):
                raise ValueError(f"not a record boundary: {X} (the unit at {q} is not longer than its count)")
            if q < X < q + count:
                return q
            nxt = q + UNIT_HEADER_SIZE + slen
        else:
            raise UnsupportedVersion(
                f"record format version {version} is not supported by "
                f"this reader (offset {q}, met while proving {X})",
                q,
            )
        if nxt == X:
            return X
        if nxt > X:
            raise ValueError(f"not a record boundary: {X} (inside the frame at {q})")
        q = nxt


# ---------------------------------------------------------------- public API


def read_log(data: bytes, start: int = 0) -> list[dict]:
    """Every message in `data` (the blob's bytes [0, mv_committed)) from message offset
    `start`.  See the module docstring; raises ValueError for a start that is not a proven
    message boundary and Corrupt (or its subclass UnsupportedVersion) for a log the reader
    must refuse.  Policy *stop*: nothing is returned if any frame from `start` on is bad."""
    if isinstance(start, bool) or not isinstance(start, int):
        raise TypeError("start must be an int")
    if not isinstance(data, bytes):
        data = bytes(data)
    C = len(data)
    if start < 0:
        raise ValueError(f"not a record boundary: negative offset {start}")
    if start > C:
        raise ValueError(f"past the committed end: {start} > {C}")
    p = _prove(data, start, C)
    skip = start - p  # messages of the unit at p before `start`
    out: list[dict] = []
    try:
        while p < C:
            msgs, e = _decode_frame(data, p, C)
            if skip:
                msgs = msgs[skip:]
                skip = 0
            out.extend(msgs)
            p = e
    except Corrupt as exc:
        exc.delivered = out
        raise
    return out


def message_id(timestamp: int, offset: int) -> str | None:
    """§5: hex12(timestamp) hex12(offset); None if either is outside 48 bits."""
    if not (0 <= timestamp < 1 << 48 and 0 <= offset < 1 << 48):
        return None
    return f"{timestamp:012x}{offset:012x}"


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Decode a Message Vault log (docs/FORMAT.md).")
    ap.add_argument("file", help="the log bytes [0, mv_committed)")
    ap.add_argument("--start", type=int, default=0, help="message offset to begin at")
    ap.add_argument(
        "--committed",
        type=int,
        default=None,
        help="mv_committed, if FILE holds the whole blob (scratch included)",
    )
    args = ap.parse_args(argv)
    with open(args.file, "rb") as f:
        data = f.read()
    if args.committed is not None:
        if not 0 <= args.committed <= len(data):
            print(json.dumps({"error": "invalid", "message": "--committed outside the file"}))
            return 2
        data = data[: args.committed]

    def line(m: dict) -> str:
        return json.dumps(
            {
                "offset": m["offset"],
                "id": message_id(m["timestamp"], m["offset"]),
                "timestamp": m["timestamp"],
                "key": base64.b64encode(m["key"]).decode("ascii"),
                "key_is_text": m["key_is_text"],
                "value": base64.b64encode(m["value"]).decode("ascii"),
                "next_offset": m["next_offset"],
            }
        )

    try:
        msgs = read_log(data, args.start)
    except ValueError as exc:
        print(json.dumps({"error": "invalid_offset", "message": str(exc)}))
        return 2
    except Corrupt as exc:
        # §7.4 stop: the reader MAY withhold the good messages before the damage; the CLI
        # shows them, then the error.
        for m in exc.delivered:
            print(line(m))
        err = {
            "error": "unsupported_version" if isinstance(exc, UnsupportedVersion) else "corrupt",
            "message": str(exc),
            "offset": exc.offset,
        }
        if exc.stored_crc is not None:
            err["stored_crc"] = f"0x{exc.stored_crc:08X}"
            err["computed_crc"] = f"0x{exc.computed_crc:08X}"
        print(json.dumps(err))
        return 1
    for m in msgs:
        print(line(m))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
