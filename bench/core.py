"""Core log benchmark (issue 2): the writer and reader against the raw page-blob primitives.

    ./dev bench core            (python -m bench.core)

Every figure is a ratio measured in one run on the same Azurite, so a noisy machine moves
both sides alike:
  * append MiB/s of StreamWriter (1 KiB messages, ~4 MiB batches) / sequential 4 MiB upload_page
  * full-scan MiB/s of StreamReader.scan / sequential 4 MiB ranged reads (one Get Blob each)
  * read() of 1,000 messages near the end of a >= 1 GiB stream / the same at offset 0
  * peak RSS of a writer process and of a full-scan reader process at 100 MiB and 1 GiB

    ./dev bench core --format   (results: core_format)

Record format 2 against format 1 (docs/FORMAT.md §11), on generated JSON events of ~100 B and
~1 KiB (bench/events.py), same messages, same Azurite, one run: blob bytes per message, writer
messages/s, full-scan rows/s by both scans (``scan``, one Message per message, and
``scan_batches``, one column batch per unit or run of records; each also against a raw download
of the same blob), paged reads of 1,000 messages (what the read API does per request), per
codec the compression ratio and the CPU per MiB of payload to compress and to decompress, and
both scans again on longer streams (``--long-scan-mib`` MiB of events per size and format),
and the per-message scan's ceilings, in the same rounds: building the same Message objects from
the stream's columns already decoded (no I/O, no checksum, no decompression), and format 2's
decode ceiling (each unit's stored bytes, held in memory, decompressed and its messages built:
no I/O, no checks, one thread) next to both formats' scans of their blobs held in memory (every
check and thread of the real scan, no storage), and the least any format 2 scan does with every
core (the scan's downloads and each unit decompressed on a thread per core: no check, no message),
and the least any format 2 scan that hands on Message objects does (the same, with each unit's
messages built and taken as the scan's are: no check), in both the short and the long scans.
With the long scans, where each format's per-message scan spends its CPU (by thread, and
Azurite's, also per MiB served: Azurite's cost is per byte, the reader's per message, so how fast
Azurite runs moves v2 / v1), what a ranged read costs Azurite by its size (it hashes every range
up to 4 MiB), v2 / v1 derived at Azure's 60 MiB/s per-blob target, and the 1 KiB events also written in
256 KiB units (the writer's target before 1 MiB or 2,048 messages). And a reader's fixed CPU per
unit: the same 1 KiB events held in memory, scanned in units of 64 KiB, 256 KiB and 1 MiB. Each
round writes and reads every format in turn (the long scans in the other order every other
round), and a v2 / v1 ratio of speeds is the median of the rounds' ratios, so that the load of a
shared machine, which drifts over minutes, weighs on both alike.

    ./dev bench core --format-memory   (results: core_format_memory)

A format 2 reader's memory at ~100 MiB and ~1 GiB of 1 KiB events (``--memory-mib`` the larger),
by both scans: the peak RSS of a reader process on Azurite, and the peak of the scan's own
Python allocations (tracemalloc, over an in-memory log) at 100 MiB, 512 MiB and the larger size.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import queue
import statistics
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

from bench.common import MIB, cpu_seconds, report, timed
from bench.events import events
from bench.threadcpu import ScanCPU
from vault_core import codecs, unitformat
from vault_core.azure import StorageAccount
from vault_core.memory import BytesLog
from vault_core.messagebatch import MessageBatch, batch_messages
from vault_core.pageblob import PageBlobs
from vault_core.prefetch import prefetched_chunks
from vault_core.prefix import FLAG_COMPRESSION_MASK
from vault_core.reader import SCAN_FIRST_CHUNK, SCAN_PREFETCH, ScanOptions, scan_log, scan_log_batches
from vault_core.recordformat import Message, NewMessage, iter_unit_messages, stored_unit_messages
from vault_core.span import Span
from vault_core.unitformat import (
    UNIT_TARGET_BYTES,
    UNIT_TARGET_MESSAGES,
    SealedUnit,
    StoredUnit,
    Unit,
    decode_unit,
    encode_unit,
)
from vault_core.vault import Vault
from vault_core.writer import Batch, StreamWriter, WriterSettings
from vault_local.azurite import Azurite

CHUNK = 4 * MIB
RAMP_FIRST = 512 * 1024
"""The first read of the scan variant that starts small and doubles (the default reads whole chunks)."""
ROUNDS = 5
MESSAGE = 1024


def batch_of(target_bytes: int, tag: int) -> Batch:
    payload = bytes([65 + tag % 26]) * (MESSAGE - 40)
    n = target_bytes // (MESSAGE + 32 + 8)
    return Batch([NewMessage(payload, f"key-{i % 100:03d}") for i in range(n)])


BATCHES = [batch_of(CHUNK, i) for i in range(4)]


def write_stream(vault: Vault, stream: str, total: int, per_call: int = 4) -> float:
    """Append ``total`` bytes of ~4 MiB batches, ``per_call`` batches per append (as the writer
    function hands over what it drained); returns seconds, batch building excluded."""
    elapsed = 0.0
    # Format 1: these figures are byte throughput against the raw primitive, and the repeated
    # payload above would compress to almost nothing in format 2 (measured by --format instead).
    with vault.writer(stream, WriterSettings(record_format=1)) as w:
        while w.state.committed < total:
            batches = [BATCHES[(w.state.committed // CHUNK + k) % 4] for k in range(per_call)]
            elapsed += timed(functools.partial(w.append, batches))
    return elapsed


def raw_upload(vault: Vault, name: str, total: int) -> float:
    blob = cast(PageBlobs, vault.page_blobs).client.get_blob_client(name)
    blob.create_page_blob(size=total)
    data = os.urandom(CHUNK)

    def run() -> None:
        for pos in range(0, total, CHUNK):
            blob.upload_page(data, offset=pos, length=CHUNK)

    return timed(run)


def raw_download(vault: Vault, stream: str, total: int) -> float:
    blob = vault.blob(stream)  # StreamBlob.read: one ranged Get Blob, as the reader's reads are

    def run() -> None:
        for pos in range(0, total, CHUNK):
            blob.read(pos, min(CHUNK, total - pos))

    return timed(run)


def memory_child(conn: str, role: str, stream: str, mib: int) -> None:
    """Run in a child process: write or scan ``mib`` MiB, then print peak RSS in MiB.

    Roles: ``writer`` / ``reader`` (format 1, the core benchmark's stream), ``events-writer``
    (``mib`` MiB of 1 KiB events in format 2), ``reader`` / ``batch-reader`` (scan or scan_batches).
    """
    vault = Vault(StorageAccount(connection_string=conn)).ensure()
    if role == "writer":
        write_stream(vault, stream, mib * MIB)
    elif role == "events-writer":
        write_events(vault, stream, mib * MIB)
    elif role == "batch-reader":
        count = sum(map(len, vault.reader.scan_batches(stream)))
        assert count > 0
    else:
        count = sum(1 for _ in vault.reader.scan(stream))
        assert count > 0
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would inherit the
    # parent's high-water mark; VmHWM belongs to this process image alone.
    with open("/proc/self/status") as status:
        hwm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(hwm_kib / 1024)


def write_events(vault: Vault, stream: str, total: int) -> None:
    """Append ``total`` bytes of messages in format 2: 1 KiB generated events, taken in turn from a
    pool of 20,000 different ones (~20 MiB), so no unit (1 MiB) holds an event twice and each
    compresses as fresh events do, without generating a gigabyte of them."""
    pool = events(20_000, "large", seed=3)
    batches = [Batch(pool[i : i + 1000]) for i in range(0, len(pool), 1000)]
    per_pass = sum(len(m.value) + len(str(m.key)) for m in pool)
    with vault.writer(stream) as w:
        for _ in range(-(-total // per_pass)):
            _append_all(w, batches)


def peak_rss(conn: str, role: str, stream: str, mib: int, env: dict[str, str] | None = None) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "bench.core", "--child", role, conn, stream, str(mib)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    ).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=4, metavar=("ROLE", "CONN", "STREAM", "MIB"))
    parser.add_argument("--throughput-mib", type=int, default=256)
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument("--format", action="store_true", help="format 2 against format 1 (core_format)")
    parser.add_argument("--format-mib", type=int, default=8, help="MiB of events per size and format")
    parser.add_argument(
        "--long-scan-mib",
        type=int,
        default=64,
        help="with --format: MiB of events of the long scans (0: none)",
    )
    parser.add_argument("--format-memory", action="store_true", help="a format 2 reader's memory")
    parser.add_argument("--memory-mib", type=int, default=1024, help="the larger stream of --format-memory")
    args = parser.parse_args()
    if args.child:
        role, conn, stream, mib = args.child
        memory_child(conn, role, stream, int(mib))
        return
    if args.format:
        format_main(args.format_mib, args.long_scan_mib)
        return
    if args.format_memory:
        format_memory_main(args.memory_mib)
        return
    t0 = time.monotonic()
    azurite = Azurite(in_memory=True).start()
    try:
        conn = azurite.connection_string
        vault = Vault(StorageAccount(connection_string=conn)).ensure()
        total = args.throughput_mib * MIB
        figures: dict[str, float] = {}

        # 1. append throughput. Each round runs raw and ours back to back; a ratio is the median
        # of the rounds' ratios, so drift on this shared machine hits both sides of a pair alike.
        raw_t, ours_t, single_t = [], [], []
        for r in range(ROUNDS):
            raw_t.append(raw_upload(vault, f"raw-{r}", total))
            ours_t.append(write_stream(vault, f"bench-w{r}", total))
            single_t.append(write_stream(vault, f"bench-s{r}", total, per_call=1))
        figures["raw upload_page MiB/s"] = args.throughput_mib / statistics.median(raw_t)
        figures["writer append MiB/s (4 batches/call)"] = args.throughput_mib / statistics.median(ours_t)
        figures["writer append MiB/s (1 batch/call)"] = args.throughput_mib / statistics.median(single_t)
        figures["append ratio (>= 0.7)"] = _paired(raw_t, ours_t)
        figures["append ratio, 1 batch/call"] = _paired(raw_t, single_t)

        # 2. full-scan throughput over the same stream bytes
        committed = vault.reader.state("bench-w0").committed
        raw_r, ours_r = [], []
        for _ in range(ROUNDS):
            raw_r.append(raw_download(vault, "bench-w0", committed))
            ours_r.append(timed(lambda: sum(1 for _ in vault.reader.scan("bench-w0"))))
        figures["raw download MiB/s"] = committed / MIB / statistics.median(raw_r)
        figures["reader scan MiB/s"] = committed / MIB / statistics.median(ours_r)
        figures["scan ratio (>= 0.8)"] = _paired(raw_r, ours_r)

        # 3+4. memory at 100 MiB and at the big size; the big stream then serves the seek test
        for mib in (100, args.big_mib):
            figures[f"writer peak RSS MiB @ {mib} MiB"] = peak_rss(conn, "writer", f"mem-{mib}", mib)
        for mib in (100, args.big_mib):
            figures[f"reader peak RSS MiB @ {mib} MiB"] = peak_rss(conn, "reader", f"mem-{mib}", mib)
        big = f"mem-{args.big_mib}"
        end_state = vault.reader.state(big)
        near_end = next(
            m.offset
            for m in vault.reader.scan(big, from_offset=_boundary_near(vault, big, end_state.committed))
        )
        starts, ends = [], []
        for _ in range(30):
            starts.append(timed(lambda: vault.reader.read(big, 0, max_count=1000, max_bytes=2 * MIB)))
            ends.append(timed(lambda: vault.reader.read(big, near_end, max_count=1000, max_bytes=2 * MIB)))
        figures["stream size GiB"] = end_state.committed / 1024**3
        figures["read 1000 @ offset 0 ms (median)"] = statistics.median(starts) * 1000
        figures["read 1000 near end ms (median)"] = statistics.median(ends) * 1000
        figures["near-end / start ratio (<= 1.5)"] = statistics.median(ends) / statistics.median(starts)
        # A consumer's first read at a boundary that is not an index point: the reader proves
        # it by walking record headers from the index point before it (FORMAT.md §7.3).
        *_, inside = (m.offset for m in itertools.islice(vault.reader.scan(big, from_offset=near_end), 300))
        firsts = []
        for _ in range(10):
            fresh = Vault(vault.account).reader  # nothing proven yet
            firsts.append(
                timed(functools.partial(fresh.read, big, inside, max_count=1000, max_bytes=2 * MIB))
            )
        figures["first read near end, start proven by a walk, ms (median)"] = statistics.median(firsts) * 1000
        figures["first-read walk / start ratio"] = statistics.median(firsts) / statistics.median(starts)
        figures["benchmark seconds"] = time.monotonic() - t0
        report("core", "./dev bench core", figures)
    finally:
        azurite.cleanup()


# -- format 2 against format 1 ---------------------------------------------------------------------
FORMATS = {"v1": (1, codecs.CODEC_NONE), "v2": (2, codecs.CODEC_ZSTD), "v2-lz4": (2, codecs.CODEC_LZ4)}
FORMAT_ROUNDS = 3


def format_main(mib: int, long_mib: int) -> None:
    t0 = time.monotonic()
    azurite = Azurite(in_memory=True).start()
    try:
        vault = Vault(StorageAccount(connection_string=azurite.connection_string)).ensure()
        figures: dict[str, float | str] = {"load average at the start": os.getloadavg()[0]}
        assert azurite.process is not None
        for size in ("small", "large"):
            figures |= _format_figures(vault, size, mib, azurite.process.pid)
        if long_mib:
            figures |= _long_scan_figures(vault, long_mib, azurite.process.pid)
        figures |= _codec_figures()
        figures |= _unit_size_figures()
        figures["load average at the end"] = os.getloadavg()[0]
        figures["benchmark seconds"] = time.monotonic() - t0
        command = f"./dev bench core --format --format-mib {mib} --long-scan-mib {long_mib}"
        report("core_format", command, figures)
    finally:
        azurite.cleanup()


def format_memory_main(big_mib: int) -> None:
    t0 = time.monotonic()
    figures: dict[str, float | str] = {"load average at the start": os.getloadavg()[0]}
    figures |= _traced_figures(big_mib)
    azurite = Azurite(in_memory=True).start()
    try:
        figures |= _memory_figures(azurite.connection_string, big_mib)
    finally:
        azurite.cleanup()
    figures["load average at the end"] = os.getloadavg()[0]
    figures["benchmark seconds"] = time.monotonic() - t0
    command = "./dev bench core --format-memory" + (f" --memory-mib {big_mib}" if big_mib != 1024 else "")
    report("core_format_memory", command, figures)


FIXED_MMAP = {"MALLOC_MMAP_THRESHOLD_": "131072"}
"""glibc's mmap threshold held at its default: every large buffer is mapped and unmapped on its
own, so RSS follows what the process holds (otherwise glibc raises the threshold after the first
freed 4 MiB buffer, and buffers recycled in its heaps leave RSS creeping up to a plateau)."""


def _memory_figures(conn: str, big_mib: int) -> dict[str, float | str]:
    """Peak RSS of a process scanning format 2 streams of 100 MiB, 512 MiB and ``big_mib`` MiB of
    messages (1 KiB events; the blob is about a fifth of that), by each scan: the reader's whole
    process (interpreter and imports included) on the real storage client, as for format 1 above;
    and the per-message scan again with glibc's mmap threshold fixed (FIXED_MMAP)."""
    out: dict[str, float | str] = {}
    sizes = (100, 512, big_mib)
    for mib in sizes:
        peak_rss(conn, "events-writer", f"fmt-mem-{mib}", mib)
    runs = (
        ("reader", "scan", None),
        ("batch-reader", "scan_batches", None),
        ("reader", "scan, fixed mmap threshold", FIXED_MMAP),
    )
    for role, label, env in runs:
        for mib in sizes:
            out[f"v2 {label} peak RSS MiB @ {mib} MiB of messages"] = peak_rss(
                conn, role, f"fmt-mem-{mib}", mib, env
            )
        small, big = (out[f"v2 {label} peak RSS MiB @ {m} MiB of messages"] for m in (100, big_mib))
        out[f"v2 {label} peak RSS @ {big_mib} MiB / @ 100 MiB (flat: ~1)"] = float(big) / float(small)
    return out


def _format_figures(vault: Vault, size: str, mib: int, azurite_pid: int) -> dict[str, float | str]:
    label = "100 B" if size == "small" else "1 KiB"
    messages = events(mib * MIB // (110 if size == "small" else 1010), size)
    batches = [Batch(messages[i : i + 1000]) for i in range(0, len(messages), 1000)]
    n = len(messages)
    out: dict[str, float | str] = {f"{label}: messages per stream": float(n)}
    per_format: dict[str, dict[str, float]] = {}
    seconds: dict[str, dict[str, list[float]]] = {
        name: {
            k: []
            for k in (
                "write",
                "scan",
                "scan, small first reads",
                "batch scan",
                "build",
                "pages",
                "raw",
                "in memory",
                "decode",
                "download + decode",
                "download + decompress",
                BUILD_CEILING,
            )
        }
        for name in FORMATS
    }
    committed: dict[str, int] = {}
    cpu = {name: ScanCPU(azurite_pid) for name in FORMATS}
    for r in range(FORMAT_ROUNDS):  # the formats in turn within a round, so drift hits them alike
        for name, (record_format, codec) in FORMATS.items():
            runs = seconds[name]
            stream = f"fmt-{size}-{name}-{r}"
            with vault.writer(stream, WriterSettings(record_format=record_format, codec=codec)) as w:
                runs["write"].append(timed(functools.partial(_append_all, w, batches)))
            committed[name] = vault.reader.state(stream).committed
            runs["raw"].append(raw_download(vault, stream, committed[name]))
            with cpu[name]:
                runs["scan"].append(timed(functools.partial(_scan_all, vault, stream)))
            runs["scan, small first reads"].append(
                timed(functools.partial(_scan_all, vault, stream, RAMP_FIRST))
            )
            runs["batch scan"].append(timed(functools.partial(_scan_batches_all, vault, stream, n)))
            decoded = list(vault.reader.scan_batches(stream))
            runs["build"].append(timed(functools.partial(_build_messages, decoded, n)))
            del decoded
            blob = BytesLog(vault.blob(stream).read(0, committed[name]))
            runs["in memory"].append(timed(functools.partial(_scan_in_memory, blob, n)))
            if record_format == 2:
                runs["decode"].append(timed(functools.partial(_decode_ceiling, blob.data, n)))
                runs["download + decode"].append(
                    timed(functools.partial(_download_and_decode, vault, stream, committed[name], n))
                )
                runs["download + decompress"].append(
                    timed(functools.partial(_download_and_decompress, vault, stream, committed[name], n))
                )
                runs[BUILD_CEILING].append(_build_ceiling_seconds(vault, stream, committed[name], n))
            del blob
            runs["pages"].append(timed(functools.partial(_read_pages, vault, stream)))
    for name, runs in seconds.items():
        record_format = FORMATS[name][0]
        per_format[name] = {"bytes": committed[name] / n} | {
            k: n / statistics.median(v) for k, v in runs.items() if v
        }
        out[f"{label} {name}: blob bytes/message"] = committed[name] / n
        out[f"{label} {name}: writer messages/s"] = per_format[name]["write"]
        out[f"{label} {name}: full scan rows/s"] = per_format[name]["scan"]
        ramped = per_format[name]["scan, small first reads"]
        out[f"{label} {name}: full scan, reads from 512 KiB doubling to 4 MiB, rows/s"] = ramped
        out[f"{label} {name}: full scan / the same with reads from 512 KiB doubling"] = _paired(
            runs["scan, small first reads"], runs["scan"]
        )
        out |= cpu[name].figures(f"{label} {name}: full scan", n * FORMAT_ROUNDS, sum(runs["scan"]))
        out[f"{label} {name}: batch scan rows/s"] = per_format[name]["batch scan"]
        out[f"{label} {name}: paged reads of 1000, messages/s"] = per_format[name]["pages"]
        out[f"{label} {name}: full scan / raw download of the same blob"] = _paired(runs["raw"], runs["scan"])
        out[f"{label} {name}: batch scan / raw download of the same blob"] = _paired(
            runs["raw"], runs["batch scan"]
        )
        out[f"{label} {name}: Message objects built from decoded columns, rows/s (scan's ceiling)"] = (
            per_format[name]["build"]
        )
        out[f"{label} {name}: full scan / that ceiling"] = _paired(runs["build"], runs["scan"])
        out[f"{label} {name}: scan of the blob held in memory (no I/O), rows/s"] = per_format[name][
            "in memory"
        ]
        if record_format == 2:
            out[f"{label} {name}: decode ceiling (decompress + build, no I/O, no checks), rows/s"] = (
                per_format[name]["decode"]
            )
            out[f"{label} {name}: full scan / decode ceiling"] = _paired(runs["decode"], runs["scan"])
            out[f"{label} {name}: download + decode ceiling, rows/s"] = per_format[name]["download + decode"]
            out[f"{label} {name}: full scan / download + decode ceiling"] = _paired(
                runs["download + decode"], runs["scan"]
            )
            out[f"{label} {name}: download + decompress on every core (no checks, no messages), rows/s"] = (
                per_format[name]["download + decompress"]
            )
            out[f"{label} {name}: full scan / download + decompress ceiling"] = _paired(
                runs["download + decompress"], runs["scan"]
            )
            out[f"{label} {name}: {BUILD_CEILING} (no checks), rows/s"] = per_format[name][BUILD_CEILING]
            out[f"{label} {name}: full scan / {BUILD_CEILING} ceiling"] = _paired(
                runs[BUILD_CEILING], runs["scan"]
            )
    v1, v2 = per_format["v1"], per_format["v2"]
    target = "0.30" if size == "small" else "0.40"
    out[f"{label}: blob bytes/message v2 / v1 (<= {target})"] = v2["bytes"] / v1["bytes"]
    out[f"{label}: full scan rows/s v2 / v1 (>= 3)"] = _paired(seconds["v1"]["scan"], seconds["v2"]["scan"])
    out[
        f"{label}: v2's Message-building ceiling / full scan v1 (the most v2 / v1 a per-message scan reaches)"
    ] = v2["build"] / v1["scan"]
    out[f"{label}: v2's decode ceiling / full scan v1"] = _paired(
        seconds["v1"]["scan"], seconds["v2"]["decode"]
    )
    out[f"{label}: v2's download + decode ceiling / full scan v1"] = _paired(
        seconds["v1"]["scan"], seconds["v2"]["download + decode"]
    )
    out[f"{label}: v2's download + decompress ceiling / full scan v1 (what any v2 scan here can reach)"] = (
        _paired(seconds["v1"]["scan"], seconds["v2"]["download + decompress"])
    )
    out[
        f"{label}: v2's {BUILD_CEILING} ceiling / full scan v1 (what a per-message v2 scan here can reach)"
    ] = _paired(seconds["v1"]["scan"], seconds["v2"][BUILD_CEILING])
    out[f"{label}: v2's decode ceiling / v1's scan of its blob held in memory"] = _paired(
        seconds["v1"]["in memory"], seconds["v2"]["decode"]
    )
    out[f"{label}: scan of the blob held in memory rows/s v2 / v1"] = _paired(
        seconds["v1"]["in memory"], seconds["v2"]["in memory"]
    )
    out[f"{label}: batch scan rows/s v2 / v1 (>= 3)"] = _paired(
        seconds["v1"]["batch scan"], seconds["v2"]["batch scan"]
    )
    out[f"{label}: batch scan rows/s v2 / full scan v1"] = v2["batch scan"] / v1["scan"]
    out[f"{label}: writer messages/s v2 / v1 (>= 1.0)"] = _paired(
        seconds["v1"]["write"], seconds["v2"]["write"]
    )
    out[f"{label}: paged reads messages/s v2 / v1"] = _paired(seconds["v1"]["pages"], seconds["v2"]["pages"])
    return out


TS = 1_764_000_000_000


def _unit_columns(
    messages: list[NewMessage], unit_bytes: int = UNIT_TARGET_BYTES
) -> list[tuple[list[bytes], list[bytes]]]:
    """The keys and values of ``messages`` cut into units as the writer cuts them: a unit closes
    before its payload would pass ``unit_bytes`` or at UNIT_TARGET_MESSAGES messages."""
    units: list[tuple[list[bytes], list[bytes]]] = []
    keys: list[bytes] = []
    values: list[bytes] = []
    size = 8  # the payload's two leading zero boundaries
    for m in messages:
        key = str(m.key).encode()
        grown = size + 8 + len(key) + len(m.value)
        if values and (grown > unit_bytes or len(values) == UNIT_TARGET_MESSAGES):
            units.append((keys, values))
            keys, values, size = [], [], 8
            grown = size + 8 + len(key) + len(m.value)
        keys.append(key)
        values.append(m.value)
        size = grown
    if values:
        units.append((keys, values))
    return units


def _events_log(total: int, unit_bytes: int = UNIT_TARGET_BYTES) -> bytes:
    """Format 2 units of ``total`` bytes of 1 KiB events: the pool of :func:`write_events` encoded
    once in units of ``unit_bytes`` of payload, laid out again and again, each unit given its new
    offset and checksum."""
    pool = events(20_000, "large", seed=3)
    units = [
        encode_unit(keys, values, 0, TS, codec=codecs.CODEC_ZSTD, key_is_text=True)
        for keys, values in _unit_columns(pool, unit_bytes)
    ]
    per_pass = sum(len(m.value) + len(str(m.key)) for m in pool)
    out = bytearray()
    for _ in range(-(-total // per_pass)):
        for unit in units:
            at = len(out)
            out += unit
            struct.pack_into("<Q", out, at + unitformat.OFFSET_OFFSET, at)
            crc = zlib.crc32(memoryview(out)[at + unitformat.CRC_COVERAGE_START :])
            struct.pack_into("<I", out, at + unitformat.CRC_OFFSET, crc)
    return bytes(out)


UNIT_SIZES = (64 * 1024, 256 * 1024, UNIT_TARGET_BYTES)
"""Units' payload sizes of :func:`_unit_size_figures`: the writer's target and smaller ones."""


def _unit_size_figures(mib: int = 32) -> dict[str, float | str]:
    """The per-message scan of the same 1 KiB events held in memory (``mib`` MiB of them), in units
    of each of ``UNIT_SIZES``: rows/s, CPU per message (every thread of the process) and blob bytes
    per message; and from the smallest and largest units, what a reader pays per unit whatever its
    size (the CPU per message falls as ``fixed / messages per unit``)."""
    out: dict[str, float | str] = {}
    cpu: dict[int, float] = {}
    per_unit: dict[int, float] = {}
    for size in UNIT_SIZES:
        log = BytesLog(_events_log(mib * MIB, size))
        n = sum(1 for _ in scan_log(log, 0, len(log.data)))
        units = sum(1 for _ in scan_log_batches(log, 0, len(log.data)))
        walls, cpus = [], []
        for _ in range(FORMAT_ROUNDS):
            start, before = time.perf_counter(), time.process_time()
            _scan_in_memory(log, n)
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - before)
        label = f"1 KiB events in units of {size // 1024} KiB"
        cpu[size], per_unit[size] = statistics.median(cpus) / n, n / units
        out[f"{label}: messages per unit"] = per_unit[size]
        out[f"{label}: blob bytes/message"] = len(log.data) / n
        out[f"{label}: scan held in memory, rows/s"] = n / statistics.median(walls)
        out[f"{label}: scan held in memory, CPU µs/message"] = cpu[size] * 1e6
    small, large = UNIT_SIZES[0], UNIT_SIZES[-1]
    fixed = (cpu[small] - cpu[large]) / (1 / per_unit[small] - 1 / per_unit[large])
    out["a reader's fixed CPU per unit, µs (from the smallest and largest units)"] = fixed * 1e6
    return out


def _traced_figures(big_mib: int) -> dict[str, float | str]:
    """The peak of the scan's own Python allocations (tracemalloc: the reads' bytes, decoded
    payloads, batches and messages; not the log, which is in memory before tracing starts)."""
    out: dict[str, float | str] = {}
    sizes = (100, 512, big_mib)
    scans = {
        "scan": lambda log: sum(1 for _ in scan_log(log, 0, len(log.data))),
        "scan_batches": lambda log: sum(map(len, scan_log_batches(log, 0, len(log.data)))),
    }
    peaks: dict[tuple[str, int], float] = {}
    for mib in sizes:
        log = BytesLog(_events_log(mib * MIB))
        # pyarrow's import, on the first unit's keys and values, is the process's, not the scan's
        assert next(scan_log(log, 0, len(log.data)))
        for label, scan in scans.items():
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            assert scan(log) > 0
            peaks[label, mib] = (tracemalloc.get_traced_memory()[1] - before) / MIB
            tracemalloc.stop()
        out[f"v2 blob MiB @ {mib} MiB of messages"] = len(log.data) / MIB
        del log
    for label in scans:
        for mib in sizes:
            out[f"v2 {label} traced peak MiB @ {mib} MiB of messages"] = peaks[label, mib]
        out[f"v2 {label} traced peak @ {big_mib} MiB / @ 100 MiB (flat: ~1)"] = (
            peaks[label, big_mib] / peaks[label, 100]
        )
    return out


LONG_SCAN_ROUNDS = 5
"""Rounds of the long scans (a ratio is the median of the rounds' ratios): a scan of 128 MiB of
1 KiB events takes 0.2-0.6 s, and this shared machine moves one round's ratio by 10-15 %."""


OLD_UNIT_BYTES = 256 * 1024
"""The writer's unit target before units of 1 MiB or 2,048 messages: the long scans compare."""
SMALLER_UNITS = "v2 in 256 KiB units"
BUILD_CEILING = "download + decompress + build Messages"
LARGE_READS = "scan with reads of 8 MiB"


def _long_stream(size: str, name: str) -> str:
    return f"long-{size}-{name.replace(' ', '-').lower()}"


def _long_scan_figures(vault: Vault, mib: int, azurite_pid: int) -> dict[str, float | str]:
    """Full scans of longer streams (``mib`` MiB of events per size and format, written once,
    scanned ``LONG_SCAN_ROUNDS`` times by both scans): long enough that a scan's 4 MiB reads
    overlap its decoding in format 2 too (8 MiB of events is one read of a format 2 blob).
    And what a ranged read costs Azurite, by its size (:func:`_azurite_read_cost`)."""
    out: dict[str, float | str] = {}
    for size, label in (("small", "100 B"), ("large", "1 KiB")):
        messages = events(mib * MIB // (110 if size == "small" else 1010), size, seed=4)
        n = len(messages)
        # 1 KiB events also in the units of earlier releases (100 B ones fill 2,048 messages first)
        names = ("v1", "v2", SMALLER_UNITS) if size == "large" else ("v1", "v2")
        for name in names:
            record_format, codec = FORMATS[name.split(" ")[0]]
            unit_bytes = OLD_UNIT_BYTES if name == SMALLER_UNITS else UNIT_TARGET_BYTES
            settings = WriterSettings(record_format=record_format, codec=codec, unit_bytes=unit_bytes)
            with vault.writer(_long_stream(size, name), settings) as w:
                _append_all(w, [Batch(messages[i : i + 1000]) for i in range(0, n, 1000)])
        del messages
        seconds: dict[tuple[str, str], list[float]] = {}
        cpu = {name: ScanCPU(azurite_pid) for name in ("v1", "v2")}
        stream = _long_stream(size, "v2")
        committed = vault.reader.state(stream).committed
        ceilings = _ceiling_arrangements()
        ceiling_args = (vault, stream, committed, n)
        for r in range(LONG_SCAN_ROUNDS):
            # The formats in turn, so drift hits both alike, and in the other order every other
            # round: what a scan leaves Azurite to collect (its garbage after 140 MiB read) then
            # falls on each format's scans alike. The per-message scans and their ceiling's two
            # arrangements side by side, for the same reason.
            timings: list[tuple[tuple[str, str], functools.partial[None]]] = []
            for name in names:
                timings.append(
                    ((name, "scan"), functools.partial(_scan_all, vault, _long_stream(size, name)))
                )
                if name == "v2":
                    timings += [
                        (
                            ("v2", arrangement),
                            functools.partial(_download_decompress_build, *ceiling_args, threads),
                        )
                        for arrangement, threads in ceilings.items()
                    ]
            for (name, what), job in timings if r % 2 == 0 else timings[::-1]:
                with cpu[name] if what == "scan" and name in cpu else contextlib.nullcontext():
                    seconds.setdefault((name, what), []).append(timed(job))
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                if name != SMALLER_UNITS:
                    seconds.setdefault((name, "batch scan"), []).append(
                        timed(functools.partial(_scan_batches_all, vault, _long_stream(size, name), n))
                    )
            if size == "large":  # reads of 8 MiB, which Azurite does not hash (_azurite_read_cost)
                for name in ("v1", "v2") if r % 2 == 0 else ("v2", "v1"):
                    seconds.setdefault((name, LARGE_READS), []).append(
                        timed(functools.partial(_scan_all, vault, _long_stream(size, name), chunk=2 * CHUNK))
                    )
            seconds.setdefault(("v2", "download + decompress"), []).append(
                timed(functools.partial(_download_and_decompress, vault, stream, committed, n))
            )
        # the ceiling: whichever arrangement did more that round
        seconds["v2", BUILD_CEILING] = [
            min(t) for t in zip(*(seconds["v2", a] for a in ceilings), strict=True)
        ]
        head = f"{label}, {mib} MiB of events"
        out[f"{head}: messages per stream"] = float(n)
        for (name, scan), runs in seconds.items():
            out[f"{head} {name}: {scan} rows/s"] = n / statistics.median(runs)
        for scan in ("scan", "batch scan"):
            out[f"{head}: {scan} rows/s v2 / v1 (>= 3)"] = _paired(seconds["v1", scan], seconds["v2", scan])
        if ("v1", LARGE_READS) in seconds:
            out[f"{head}: {LARGE_READS} rows/s v2 / v1"] = _paired(
                seconds["v1", LARGE_READS], seconds["v2", LARGE_READS]
            )
            for name in ("v1", "v2"):
                out[f"{head} {name}: {LARGE_READS} / scan"] = _paired(
                    seconds[name, "scan"], seconds[name, LARGE_READS]
                )
        out[f"{head}: batch scan rows/s v2 / scan v1"] = _paired(
            seconds["v1", "scan"], seconds["v2", "batch scan"]
        )
        out |= _at_blob_target(head, vault, size, n, seconds)
        out |= _scan_cpu_figures(head, vault, size, n, cpu, seconds)
        if size == "large":
            for name in ("v2", SMALLER_UNITS):
                per_message = vault.reader.state(_long_stream(size, name)).committed / n
                out[f"{head} {name}: blob bytes/message"] = per_message
            out[f"{head}: scan rows/s v2 / {SMALLER_UNITS}"] = _paired(
                seconds[SMALLER_UNITS, "scan"], seconds["v2", "scan"]
            )
            out |= _azurite_read_cost(vault, "long-large-v1", azurite_pid)
        ceiling = seconds["v2", "download + decompress"]
        out[f"{head} v2: scan / download + decompress ceiling"] = _paired(ceiling, seconds["v2", "scan"])
        out[f"{head}: v2's download + decompress ceiling / scan v1 (what any v2 scan here can reach)"] = (
            _paired(seconds["v1", "scan"], ceiling)
        )
        built = seconds["v2", BUILD_CEILING]
        out[f"{head} v2: scan / {BUILD_CEILING} ceiling"] = _paired(built, seconds["v2", "scan"])
        out[f"{head}: rounds of {LONG_SCAN_ROUNDS} with scan rows/s v2 / v1 >= 3"] = _rounds_at_least(
            seconds["v1", "scan"], seconds["v2", "scan"], 3
        )
        out[f"{head}: rounds of {LONG_SCAN_ROUNDS} with v2's {BUILD_CEILING} ceiling / scan v1 >= 3"] = (
            _rounds_at_least(seconds["v1", "scan"], built, 3)
        )
        reach = f"{head}: v2's {BUILD_CEILING} ceiling / scan v1 (what a per-message v2 scan here can reach)"
        out[reach] = _paired(seconds["v1", "scan"], built)
    return out


def _scan_cpu_figures(
    head: str,
    vault: Vault,
    size: str,
    n: int,
    cpu: dict[str, ScanCPU],
    seconds: dict[tuple[str, str], list[float]],
) -> dict[str, float | str]:
    """Where the long per-message scans' CPU went, by thread and Azurite's, for both formats; and
    Azurite's CPU for each MiB it served. Azurite's cost is per byte served and the reader's per
    message, so how fast Azurite runs on the day moves v2 / v1: format 1 has 4.7 times the bytes."""
    out: dict[str, float | str] = {}
    for name, scan_cpu in cpu.items():
        runs = seconds[name, "scan"]
        out |= scan_cpu.figures(f"{head} {name}: scan", n * len(runs), sum(runs))
        served = vault.reader.state(_long_stream(size, name)).committed * len(runs) / MIB
        out[f"{head} {name}: scan: Azurite CPU ms per MiB served"] = (
            scan_cpu.seconds["azurite"] * 1e3 / served
        )
    return out


BLOB_TARGET_MIB_S = 60
"""Azure's scalability target for one page blob's throughput (MiB/s)."""


def _at_blob_target(
    head: str, vault: Vault, size: str, n: int, seconds: dict[tuple[str, str], list[float]]
) -> dict[str, float | str]:
    """Derived, not timed: each format's scan as fast as measured here, or as fast as Azure's
    60 MiB/s per blob lets its bytes come, whichever is less; and v2 / v1 of those. Where both
    scans measured here outrun the target, as they do, a scan of one blob on Azure is bound by
    its bytes, and v2 / v1 is the inverse of the bytes ratio."""
    out: dict[str, float | str] = {}
    capped: dict[str, float] = {}
    for name in ("v1", "v2"):
        per_message = vault.reader.state(f"long-{size}-{name}").committed / n
        measured = n / statistics.median(seconds[name, "scan"])
        out[f"{head} {name}: scan MiB/s of blob (Azure's target for one blob: {BLOB_TARGET_MIB_S})"] = (
            measured * per_message / MIB
        )
        capped[name] = min(measured, BLOB_TARGET_MIB_S * MIB / per_message)
    out[f"{head}: scan rows/s v2 / v1 at Azure's per-blob target (derived)"] = capped["v2"] / capped["v1"]
    return out


def _azurite_read_cost(vault: Vault, stream: str, azurite_pid: int) -> dict[str, float | str]:
    """Azurite's CPU per MiB served, by ranged reads of 4 MiB (the scan's) and of 8 MiB, as the
    scan makes them (4 in flight). Azurite computes an MD5 of every range up to 4 MiB, asked for
    or not, and reads the range's extents twice to do it (``BlobHandler``'s Get Blob); Azure
    computes one only when ``x-ms-range-get-content-md5`` asks. So a scan on Azurite pays for
    every byte it reads more than it would on Azure: format 1's scan, which reads 4.5 times the
    bytes, the most."""
    out: dict[str, float | str] = {}
    blob, committed = vault.blob(stream), vault.reader.state(stream).committed
    for label, chunk in (("4 MiB", CHUNK), ("8 MiB", 2 * CHUNK)):
        costs, speeds = [], []
        for _ in range(3):
            before, start = cpu_seconds(azurite_pid), time.perf_counter()
            for _data, _last in prefetched_chunks(blob, 0, committed, chunk=chunk, prefetch=SCAN_PREFETCH):
                pass
            speeds.append(committed / MIB / (time.perf_counter() - start))
            costs.append((cpu_seconds(azurite_pid) - before) * 1e3 / (committed / MIB))
        out[f"Azurite, ranged reads of {label}: CPU ms per MiB served"] = statistics.median(costs)
        out[f"Azurite, ranged reads of {label}: MiB/s"] = statistics.median(speeds)
    return out


def _append_all(writer: StreamWriter, batches: list[Batch]) -> None:
    for i in range(0, len(batches), 4):  # 4 batches per call, as the writer function hands them over
        writer.append(batches[i : i + 4])


def _scan_all(vault: Vault, stream: str, first_chunk: int | None = None, chunk: int = CHUNK) -> None:
    """The per-message scan as a consumer runs it; reads of ``chunk`` from the start, or from
    ``first_chunk`` doubling."""
    options = ScanOptions(chunk=chunk, first_chunk=chunk if first_chunk is None else first_chunk)
    assert sum(1 for _ in vault.reader.scan(stream, options=options)) > 0


def _scan_batches_all(vault: Vault, stream: str, n: int) -> None:
    assert sum(map(len, vault.reader.scan_batches(stream))) == n


def _build_messages(batches: list[MessageBatch], n: int) -> None:
    """Build every message of decoded ``batches`` as a :class:`Message`, a batch at a time as the
    scan does (no I/O, no checksum, no decompression): what any per-message scan pays at least."""
    assert sum(1 for _ in batch_messages(batches)) == n


def _scan_in_memory(log: BytesLog, n: int) -> None:
    """The per-message scan of a blob already in memory: every check and every thread of the scan
    on Azurite, without the storage (each read a slice of the held bytes)."""
    assert sum(1 for _ in scan_log(log, 0, len(log.data))) == n


def _decode_ceiling(blob: bytes, n: int) -> None:
    """Format 2's least work per message, on one thread: each unit's stored bytes (already in memory)
    decompressed, its payload split into the key and value boundaries and buffers, and its messages
    built as the scan builds them. No I/O, no checksum, none of the header's or the boundaries'
    checks, no threads (the scan may use a second core; this uses one)."""
    built, pos = _decode_units(blob)
    assert built == n and pos == len(blob)


def _download_and_decode(vault: Vault, stream: str, committed: int, n: int) -> None:
    """The decode ceiling fed by the storage, for when the scan shares the cores with it: the scan's
    own downloads (plain ranged Get Blobs, ``StreamBlob.read``, as big and as many in flight as the
    scan's: :func:`~vault_core.prefetch.prefetched_chunks`) and, on this thread as each range comes
    in, :func:`_decode_ceiling`'s work on the whole units it holds (a unit cut by a range's end
    waits for the next). No checksum, none of the header's or boundaries' checks, one decoding
    thread (the scan checks and decompresses on two)."""
    chunks = prefetched_chunks(
        vault.blob(stream), 0, committed, chunk=CHUNK, prefetch=SCAN_PREFETCH, first=SCAN_FIRST_CHUNK
    )
    built, carry = 0, b""
    for data, _ in chunks:
        buf = carry + data if carry else data
        count, pos = _decode_units(buf)
        built, carry = built + count, buf[pos:]
    assert built == n and not carry


def _download_and_decompress(vault: Vault, stream: str, committed: int, n: int) -> None:
    """The least any reader of format 2 does, with every core of the machine: the scan's own
    downloads (:func:`~vault_core.prefetch.prefetched_chunks`, as big and as many in flight as the
    scan's) and every unit decompressed on a pool of one thread per core as its bytes come in (the
    codecs release the GIL). No checksum, no check, no message built: a ceiling of any scan of the
    blob here, the per-message and the batch scan alike (they do all of this and more)."""
    chunks = prefetched_chunks(
        vault.blob(stream), 0, committed, chunk=CHUNK, prefetch=SCAN_PREFETCH, first=SCAN_FIRST_CHUNK
    )

    def decompressed(codec: int, stored: bytes | memoryview, length: int) -> int:
        return len(codecs.decompress(codec, stored, length))  # the payload itself is dropped at once

    built = 0
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        pending = []
        for unit in _sealed_units(chunks):
            codec = unit.flags & FLAG_COMPRESSION_MASK
            pending.append(pool.submit(decompressed, codec, unit.stored, unit.payload_length))
            built += unit.size
        assert sum(f.result() for f in pending) > 0
    assert built == n


def _ceiling_arrangements() -> dict[str, int]:
    """The two ways :func:`_download_decompress_build` is timed, by label: the units decompressed
    on one helper thread (the scan's arrangement) and on one per core. Neither wins every time on
    two cores shared with Azurite (a second decompressing thread also takes the core the builder
    or Azurite needs, and hands its results back through the GIL), so the ceiling is whichever
    did more that round."""
    return {f"{BUILD_CEILING}, {k} decompressing": k for k in sorted({1, os.cpu_count() or 2})}


def _build_ceiling_seconds(vault: Vault, stream: str, committed: int, n: int) -> float:
    """Seconds of :func:`_download_decompress_build` in the better of its arrangements
    (:func:`_ceiling_arrangements`), timed one after the other."""
    return min(
        timed(functools.partial(_download_decompress_build, vault, stream, committed, n, threads))
        for threads in _ceiling_arrangements().values()
    )


def _download_decompress_build(
    vault: Vault, stream: str, committed: int, n: int, threads: int = os.cpu_count() or 2
) -> None:
    """The least work of a per-message reader of format 2 here, at the scan's reads: the same
    ranged reads as :func:`_scan_all`'s (4 MiB, as many in flight), waited for on a feeding
    thread as the scan's are (so the builder never waits on a read while a unit is ready), each
    unit decompressed on a pool of ``threads`` (the codec releases the GIL) a few units ahead,
    and its ``Message`` objects built on this thread as the scan builds them
    (:func:`~vault_core.recordformat.stored_unit_messages`: the Python objects a per-message scan
    hands on, which only a thread holding the GIL can make) and taken by the same consumer as
    :func:`_scan_all`'s. No checksum and no check of a header or of the boundaries, which the
    scan makes. A ceiling of the per-message scan with these reads on this machine, where Azurite
    serves the bytes from the same two cores, as far as measured (not a bound proven; with larger
    reads a scan does more: the long scans' ``scan with reads of 8 MiB``)."""
    chunks = prefetched_chunks(
        vault.blob(stream), 0, committed, chunk=CHUNK, prefetch=SCAN_PREFETCH, first=CHUNK
    )
    opening: queue.Queue[Future[StoredUnit] | BaseException | None] = queue.Queue(maxsize=2 * threads)

    def opened(unit: SealedUnit) -> StoredUnit:
        payload = codecs.decompress(unit.flags & FLAG_COMPRESSION_MASK, unit.stored, unit.payload_length)
        return StoredUnit(unit.offset, unit.timestamp, unit.flags, unit.size, unit.length, payload)

    def feed(pool: ThreadPoolExecutor) -> None:
        try:
            for unit in _sealed_units(chunks):
                opening.put(pool.submit(opened, unit))
            opening.put(None)
        except BaseException as exc:  # handed to the builder, which raises it
            opening.put(exc)

    def units() -> Iterator[StoredUnit]:
        while (item := opening.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item.result()

    def built(unit: StoredUnit) -> Iterator[Message]:
        arrays = 4 * (unit.size + 1)
        key_ends, value_ends = array("I"), array("I")
        key_ends.frombytes(unit.payload[:arrays])
        value_ends.frombytes(unit.payload[arrays : 2 * arrays])
        return stored_unit_messages(unit, key_ends, value_ends, 0, unit.size)

    with ThreadPoolExecutor(threads) as pool:
        feeder = threading.Thread(target=feed, args=(pool,), name="ceiling-feed")
        feeder.start()
        try:
            assert sum(1 for _ in itertools.chain.from_iterable(map(built, units()))) == n
        finally:
            while feeder.is_alive():  # the builder stopped early: let the feeder finish
                with contextlib.suppress(queue.Empty):
                    opening.get(timeout=0.1)
            feeder.join()


def _sealed_units(chunks: Iterable[tuple[bytes, bool]]) -> Iterator[SealedUnit]:
    """The format 2 units of a blob read in ``chunks`` (:func:`prefetched_chunks`), in order, each
    as its header says (nothing checked: the ceilings' reading), its stored bytes a view into its
    chunk; a unit cut by a chunk's end is completed from the next."""
    header, header_size = unitformat.UNIT_HEADER, unitformat.UNIT_HEADER_SIZE
    carry = b""
    for data, _ in chunks:
        buf = carry + data if carry else data
        view, pos = memoryview(buf), 0
        while pos + header_size <= len(buf):
            _, _, _, flags, count, payload_length, stored, offset, ts = header.unpack_from(buf, pos)
            end = pos + header_size + stored
            if end > len(buf):
                break
            yield SealedUnit(
                offset, ts, flags, count, end - pos, payload_length, view[pos + header_size : end]
            )
            pos = end
        carry = buf[pos:]
    assert not carry, "a unit cut off at the blob's end"


def _decode_units(blob: bytes) -> tuple[int, int]:
    """Messages built from the whole units at the start of ``blob`` (decompressed, split, built as
    the scan builds them; nothing checked), and where the first unit not whole in it starts."""
    view = memoryview(blob)
    built = pos = 0
    while pos + unitformat.UNIT_HEADER_SIZE <= len(blob):
        _, _, _, flags, count, payload_length, stored, offset, ts = unitformat.UNIT_HEADER.unpack_from(
            blob, pos
        )
        length = unitformat.UNIT_HEADER_SIZE + stored
        if pos + length > len(blob):
            break
        at = pos + unitformat.STORED_OFFSET
        payload = codecs.decompress(flags & FLAG_COMPRESSION_MASK, view[at : pos + length], payload_length)
        arrays = 4 * (count + 1)
        key_ends, value_ends = array("I"), array("I")
        key_ends.frombytes(payload[:arrays])
        value_ends.frombytes(payload[arrays : 2 * arrays])
        keys_end = 2 * arrays + key_ends[-1]
        keys, values = payload[2 * arrays : keys_end], payload[keys_end:]
        unit = Unit(offset, ts, flags, count, length, key_ends, value_ends, keys, values, b"")
        built += sum(1 for _ in iter_unit_messages(unit))
        pos += length
    return built, pos


def _read_pages(vault: Vault, stream: str) -> None:
    """Read the stream as a consumer of the read API does: pages of 1,000 messages (1 MiB)."""
    reader = Vault(vault.account).reader  # a fresh process: nothing proven, nothing cached
    offset = 0
    while True:
        page = reader.read(stream, offset, max_count=1000, max_bytes=MIB)
        if not page.messages:
            return
        offset = page.next_offset


def _codec_figures() -> dict[str, float | str]:
    """Per codec: stored / payload bytes and CPU seconds per MiB of payload, on units of the
    writer's target size built from the same events."""
    out: dict[str, float | str] = {}
    for size, label in (("small", "100 B"), ("large", "1 KiB")):
        units = _unit_columns(events(8 * MIB // (110 if size == "small" else 1010), size, seed=2))
        for name, codec in codecs.CODECS.items():
            start = time.process_time()
            encoded = [encode_unit(k, v, 0, 0, codec=codec, key_is_text=True) for k, v in units]
            encode_cpu = time.process_time() - start
            start = time.process_time()
            payload = sum(
                len(u.payload)
                for u in (decode_unit(Span(e, 0, 0, len(e)), 0) for e in encoded)
                if u is not None
            )
            decode_cpu = time.process_time() - start
            stored = sum(len(e) for e in encoded)
            out[f"codec {name}, {label}: stored / payload"] = stored / payload
            out[f"codec {name}, {label}: encode CPU ms/MiB"] = encode_cpu * 1000 / (payload / MIB)
            out[f"codec {name}, {label}: decode CPU ms/MiB"] = decode_cpu * 1000 / (payload / MIB)
        out |= _zstd_level_figures(label, [_payload_of(k, v) for k, v in units])
    return out


ZSTD_LEVELS = (1, 2, 3, 4, 6)
"""zstd levels in the codec table (codecs.ZSTD_LEVEL is the writer's)."""


def _payload_of(keys: list[bytes], values: list[bytes]) -> bytes:
    """The payload of a unit of ``keys`` and ``values``, as the writer lays it out before its codec."""
    encoded = encode_unit(keys, values, 0, 0, codec=codecs.CODEC_NONE, key_is_text=True)
    unit = decode_unit(Span(encoded, 0, 0, len(encoded)), 0)
    assert unit is not None
    return unit.payload


def _zstd_level_figures(label: str, payloads: list[bytes]) -> dict[str, float | str]:
    """Per zstd level, on the same unit payloads: stored / payload bytes, and the CPU per MiB of
    payload to compress and to decompress (codecs.compress / decompress alone: no unit framing,
    no checksum), each the least of three passes (the machine is shared)."""
    out: dict[str, float | str] = {}
    mib = sum(map(len, payloads)) / MIB
    for level in ZSTD_LEVELS:
        stored: list[bytes] = []
        compress_cpu = decompress_cpu = float("inf")
        for _ in range(3):
            start = time.process_time()
            stored = [codecs.compress(codecs.CODEC_ZSTD, p, level=level) for p in payloads]
            compress_cpu = min(compress_cpu, time.process_time() - start)
            start = time.process_time()
            for p, s in zip(payloads, stored, strict=True):
                codecs.decompress(codecs.CODEC_ZSTD, s, len(p))
            decompress_cpu = min(decompress_cpu, time.process_time() - start)
        head = f"zstd level {level}{' (the default)' if level == codecs.ZSTD_LEVEL else ''}, {label}"
        out[f"{head}: stored / payload"] = sum(map(len, stored)) / (mib * MIB)
        out[f"{head}: compress CPU ms/MiB"] = compress_cpu * 1000 / mib
        out[f"{head}: decompress CPU ms/MiB"] = decompress_cpu * 1000 / mib
    return out


def _rounds_at_least(raw_seconds: list[float], our_seconds: list[float], ratio: float) -> float:
    """How many rounds had our speed at least ``ratio`` times raw speed (the spread :func:`_paired`'s
    median hides)."""
    return float(sum(r / o >= ratio for r, o in zip(raw_seconds, our_seconds, strict=True)))


def _paired(raw_seconds: list[float], our_seconds: list[float]) -> float:
    """Our speed over raw speed: the median of the per-round ratios of back-to-back runs."""
    return statistics.median(r / o for r, o in zip(raw_seconds, our_seconds, strict=True))


def _boundary_near(vault: Vault, stream: str, committed: int) -> int:
    """An index point (a record boundary) about 2 MiB before the end, found without scanning."""
    points = vault.index.points(stream, max(0, committed - 4 * MIB))
    return points[0].offset


if __name__ == "__main__":
    main()
