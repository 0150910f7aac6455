"""What one anonymous 90 MiB POST costs the local host, against the same POST with a key.

    ./dev bench anonymous_post          (python -m bench.anonymous_post)

One local host on Azurite. The same body of 90 MiB (under the front end's 100 MB, over the
app's ``VAULT_MAX_BATCH_BYTES``) is POSTed to ``/api/streams/<s>/messages`` twice per round:
without any credential, which the host refuses with the app's 401 before it reads the body
(``vault_app/auth/early.py``), and with the host's function key, which the host must read and
pass to a worker, where the app refuses it as too large (413). The body is sent whole both
times, as a client that does not look at the answer before it has sent would.

For each POST the host and its language workers' CPU time is read before and after, and their
peak resident memory (``VmHWM``) is reset before and compared with their resident memory
(``VmRSS``) before, per process, the growths summed. The figures are the medians over ROUNDS
rounds, anonymous then authorised, on the same host; the ratios (anonymous ÷ authorised) are
what the issue asks for, since both sides are measured in the same run on the same machine.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from dataclasses import dataclass

import httpx
import psutil

from bench.common import MIB, cpu_seconds, report, reset_peak, status_kib
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

BODY_BYTES = 90 * MIB
ROUNDS = 3
SETTLE_SECONDS = 0.5
"""Time after the answer before the figures are read, for work the host does after answering
(discarding the rest of a refused body); the same for both POSTs."""


@dataclass(frozen=True)
class Cost:
    status: int
    error: str | None
    json_answer: bool
    cpu_seconds: float
    peak_growth: int
    """Bytes: the sum over the host and its workers of peak RSS after minus RSS before."""


def host_pids(host: HostProcess) -> list[int]:
    """The host and its language workers."""
    assert host.proc is not None
    parent = psutil.Process(host.proc.pid)
    return [parent.pid, *(child.pid for child in parent.children(recursive=True))]


def post(host: HostProcess, body: bytes, *, key: str | None) -> Cost:
    pids = host_pids(host)
    for pid in pids:
        reset_peak(pid)
    resident = {pid: status_kib(pid, "VmRSS") for pid in pids}
    cpu = sum(cpu_seconds(pid) for pid in pids)
    r = httpx.post(
        f"{host.url}/streams/anon-{uuid.uuid4().hex[:8]}/messages",
        params={"code": key} if key else None,
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    time.sleep(SETTLE_SECONDS)
    spent = sum(cpu_seconds(pid) for pid in pids) - cpu
    grown = sum(status_kib(pid, "VmHWM") - resident[pid] for pid in pids) * 1024
    if pids != host_pids(host):
        raise RuntimeError("a language worker was replaced during the POST: the figures would be wrong")
    is_json = r.headers.get("content-type", "").startswith("application/json")
    return Cost(r.status_code, r.json().get("error") if is_json else None, is_json, spent, grown)


def median(costs: list[Cost], field: str) -> float:
    return float(statistics.median(getattr(c, field) for c in costs))


def main() -> None:
    body = b'{"messages": [{"value": "' + b"v" * (BODY_BYTES - 32) + b'"}]}'
    storage = Azurite().start()
    try:
        host = HostProcess(storage.connection_string).start()
        try:
            httpx.get(f"{host.url}/health", timeout=30)
            warm = json.dumps({"messages": [{"value": "warm"}]}).encode()
            post(host, warm, key=host.key)  # imports, pools
            post(host, warm, key=None)
            anonymous: list[Cost] = []
            authorised: list[Cost] = []
            for _ in range(ROUNDS):
                anonymous.append(post(host, body, key=None))
                authorised.append(post(host, body, key=host.key))
        finally:
            host.stop()
    finally:
        storage.cleanup()
    for cost in anonymous:
        if (cost.status, cost.error, cost.json_answer) != (401, "unauthorized", True):
            raise RuntimeError(f"an anonymous POST was answered {cost}")
    for cost in authorised:
        if (cost.status, cost.error) != (413, "too_large"):  # the app's VAULT_MAX_BATCH_BYTES, after the body
            raise RuntimeError(f"an authorised POST was answered {cost}")
    first = authorised[0]
    anon_cpu, auth_cpu = median(anonymous, "cpu_seconds"), median(authorised, "cpu_seconds")
    anon_mem, auth_mem = median(anonymous, "peak_growth"), median(authorised, "peak_growth")
    figures: dict[str, float | int | str] = {
        "body MiB": round(len(body) / MIB, 2),
        "rounds (medians below)": ROUNDS,
        "anonymous answer": f"{anonymous[0].status} {anonymous[0].error} (JSON)",
        "authorised answer": f"{first.status} {first.error}" + (" (JSON)" if first.json_answer else ""),
        "anonymous: host + workers CPU-s": round(anon_cpu, 3),
        "authorised: host + workers CPU-s": round(auth_cpu, 3),
        "anonymous: peak RSS growth MB": round(anon_mem / 1e6, 1),
        "authorised: peak RSS growth MB": round(auth_mem / 1e6, 1),
        "CPU-s, anonymous / authorised": round(anon_cpu / auth_cpu, 3),
        "peak RSS growth, anonymous / authorised": round(anon_mem / auth_mem, 3),
    }
    report("anonymous_post", "./dev bench anonymous_post", figures)


if __name__ == "__main__":
    main()
