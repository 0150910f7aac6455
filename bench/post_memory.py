"""Peak memory of one POST against its body size, in the language worker that runs it.

    ./dev bench post_memory          (python -m bench.post_memory)

For each body shape (16 MiB or close, real HTTP to the local host on Azurite, the whole request
path: parsing, claim-check upload, queue message), the worker's peak resident memory is reset
(``/proc/PID/clear_refs``), the POST is sent, and the new peak is compared with the resident
memory before: growth / body size should stay at most about 4 (issue 12).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable

import httpx
import psutil

from bench.common import MIB, report, reset_peak, status_kib
from vault_local.azurite import Azurite
from vault_local.process import HostProcess


def junk_fields() -> bytes:
    return b'{"messages": [{"value": "x"}], "junk": [' + b"0," * (8 * MIB - 64) + b"0]}"


def junk_in_messages() -> bytes:
    one = b'{"value": "x", "extra": [' + b"1," * 500 + b"1]}"
    return b'{"messages": [' + b",".join([one] * 9000) + b"]}"


def big_values() -> bytes:
    return json.dumps({"messages": [{"value": "v" * 1_000_000} for _ in range(15)]}).encode()


def many_values() -> bytes:
    return json.dumps({"messages": [{"key": f"k{i}", "value": "v" * 1_600} for i in range(10_000)]}).encode()


def random_big_values() -> bytes:
    """``big_values`` with values no codec makes smaller: a format 2 app's claim-check units are
    then as large as the messages."""
    rng = random.Random(1)
    return json.dumps({"messages": [{"value": rng.randbytes(500_000).hex()} for _ in range(15)]}).encode()


def random_many_values() -> bytes:
    rng = random.Random(2)
    messages = [{"key": f"k{i}", "value": rng.randbytes(800).hex()} for i in range(10_000)]
    return json.dumps({"messages": messages}).encode()


def tiny_messages() -> bytes:
    return b'{"messages": [' + b",".join([b'{"value":""}'] * 1_250_000) + b"]}"


def deep_nesting() -> bytes:
    return b'{"messages": ' + b"[" * (8 * MIB - 64) + b"]" * (8 * MIB - 64) + b"}"


SHAPES: dict[str, Callable[[], bytes]] = {
    "16 MiB of unknown fields (400)": junk_fields,
    "unknown fields inside messages (400)": junk_in_messages,
    "15 values of 1 MB (202)": big_values,
    "10,000 values of 1.6 KB (202)": many_values,
    "15 random values of 1 MB (202)": random_big_values,
    "10,000 random values of 1.6 KB (202)": random_many_values,
    "1.25M tiny messages (413)": tiny_messages,
    "16 MiB of nesting (400)": deep_nesting,
}


def measure(host: HostProcess, body: bytes) -> tuple[int, float]:
    """The POST's status, and the growth of the worker that served it (the one that grew most:
    the host runs more than one worker process) over the body's size."""
    assert host.proc is not None
    workers = [w.pid for w in psutil.Process(host.proc.pid).children()]
    for pid in workers:
        reset_peak(pid)
    before = {pid: status_kib(pid, "VmRSS") for pid in workers}
    r = httpx.post(
        f"{host.url}/streams/mem-{uuid.uuid4().hex[:8]}/messages",
        params={"code": host.key},
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    grown = max(status_kib(pid, "VmHWM") - before[pid] for pid in workers) * 1024
    return r.status_code, grown / len(body)


def main() -> None:
    storage = Azurite().start()
    figures: dict[str, float | int] = {}
    try:
        for name, make in SHAPES.items():
            body = make()
            # No warm spare: only the host's workers are measured.
            host = HostProcess(storage.connection_string, settings={"LOCAL_SPARE_WORKERS": "0"}).start()
            try:
                httpx.get(f"{host.url}/health", timeout=30)
                measure(host, json.dumps({"messages": [{"value": "warm"}]}).encode())  # imports, pools
                status, ratio = measure(host, body)
            finally:
                host.stop()
            figures[f"{name}: body MiB"] = round(len(body) / MIB, 2)
            figures[f"{name}: status"] = status
            figures[f"{name}: peak growth / body (<= 4)"] = round(ratio, 2)
    finally:
        storage.cleanup()
    report("post_memory", "./dev bench post_memory", figures)


if __name__ == "__main__":
    main()
