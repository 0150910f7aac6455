"""``python -m vault_local host|demo|issuer``: the local Functions host, Azurite + host + a demo,
or the development token issuer alone."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType

from vault_local.azurite import ROOT, Azurite, free_port
from vault_local.process import HostProcess, explorer_url, new_key
from vault_local.startup import check_worker_counts


class Shown:
    """Runs curl commands and prints them, with each credential shown by its variable name:
    a token is a screenful, and what matters is which one was used."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # value -> $NAME

    def __call__(self, cmd: list[str]) -> str:
        print("\n$ " + " ".join(self._arg(c) for c in cmd), flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        print(out.strip()[:1500])
        return out

    def _arg(self, arg: str) -> str:
        for value, name in self.names.items():
            if value in arg:  # double quotes, so that the line works pasted into a shell
                return '"' + arg.replace(value, name) + '"'
        return shlex.quote(arg)


def _until_waiting(api: str, key: str, timeout: float = 1.0) -> None:
    """Until the host holds a long poll (``waiting`` in ``/health``, which an admin key sees), so
    that the tail is seen answering a post made after it began. At most ``timeout``: a host that
    cannot tell (with more worker processes ``/health`` may ask an idle one) posts that late."""
    deadline = time.monotonic() + timeout
    health = urllib.request.Request(f"{api}/health", headers={"x-functions-key": key})
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(health, timeout=1) as r:
            if json.load(r).get("waiting", 0) > 0:
                return
        time.sleep(0.05)


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    """SIGTERM or SIGINT: leave the demo through its ``finally``, which stops the host and
    Azurite gracefully (both run in sessions of their own, so no signal reaches them but ours).
    Further signals are ignored, so they cannot cut that cleanup short; it is bounded."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(0)


def demo(args: argparse.Namespace) -> None:
    from vault_local.dev_issuer import DevIssuer  # jwt and cryptography: not for the host's start

    if not shutil.which("curl"):
        sys.exit("the demo uses curl: install it (apt-get install curl)")
    data: Path = args.data
    data.mkdir(parents=True, exist_ok=True)
    azurite = Azurite(location=data, blob_port=free_port(), queue_port=free_port(), table_port=free_port())
    # Authentication is on, as in Azure: a development issuer on loopback (its RSA key made
    # now, in memory) signs the tokens, and the app validates them like Entra ID's.
    issuer = DevIssuer().start()
    key = new_key()
    host = HostProcess(
        azurite.connection_string, port=args.port, key=key, settings=issuer.settings(), echo=True
    )
    producer = issuer.mint("demo-producer", roles=["Vault.Write.All"], lifetime=8 * 3600)
    reader = issuer.mint("demo-reader", roles=["Vault.Read.All"], lifetime=8 * 3600)
    show = Shown({producer: "$PRODUCER_TOKEN", reader: "$READER_TOKEN", key: "$VAULT_KEY"})
    waiter: subprocess.Popen[str] | None = None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_on_signal)
    try:
        azurite.start()
        print(
            f"Azurite: blob {azurite.blob_port}, queue {azurite.queue_port}, "
            f"table {azurite.table_port} (data in {data})"
        )
        api = host.start().url
        print(f"\nDevelopment issuer {issuer.url}; the app trusts it for audience {issuer.audience}.")
        print("PRODUCER_TOKEN: a token of demo-producer with app role Vault.Write.All (write, every stream)")
        print("READER_TOKEN:   a token of demo-reader with app role Vault.Read.All (read, every stream)")
        print(
            "VAULT_KEY:      the function key 'local', granted admin on every stream by VAULT_ACCESS_POLICY"
        )
        as_producer = ["-H", f"Authorization: Bearer {producer}"]
        as_reader = ["-H", f"Authorization: Bearer {reader}"]
        post = ["curl", "-s", "-H", "Content-Type: application/json"]
        show(
            [
                *post,
                *as_producer,
                "-d",
                '{"messages":[{"key":"order-1","value":"{\\"total\\": 42}"},'
                '{"key":"order-2","value":"{\\"total\\": 7}"}]}',
                f"{api}/streams/orders/messages?wait=10",
            ]
        )
        show(
            [
                "curl",
                "-s",
                "-H",
                "Content-Type: application/x-ndjson",
                "-H",
                f"x-functions-key: {key}",
                "--data-binary",
                '{"key":"u1","value":"click /home"}\n{"key":"u2","value":"click /cart"}\n',
                f"{api}/streams/clicks/messages?wait=10",
            ]
        )
        show(["curl", "-s", *as_reader, f"{api}/streams/orders/messages?from=0"])
        show(
            [
                "curl",
                "-s",
                *as_reader,
                "-H",
                "Accept: application/x-ndjson",
                f"{api}/streams/clicks/messages?from=0",
            ]
        )
        show(["curl", "-s", *as_reader, f"{api}/streams"])
        print("\nWithout a credential, and with a read-only token on a write:")
        show(["curl", "-s", "-i", f"{api}/streams/orders/messages?from=0"])
        show([*post, *as_reader, "-d", '{"messages":[{"value":"x"}]}', f"{api}/streams/orders/messages"])
        tail = subprocess.run(
            ["curl", "-s", *as_reader, "-D", "-", "-o", "/dev/null", f"{api}/streams/clicks/messages?from=0"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        nxt = next(
            (ln.split(":")[1].strip() for ln in tail.splitlines() if ln.lower().startswith("x-next-offset")),
            "0",
        )
        print(f"\nTailing clicks from offset {nxt} (long poll, wait=10) while a producer posts...")
        waiter = subprocess.Popen(
            ["curl", "-s", *as_reader, f"{api}/streams/clicks/messages?from={nxt}&wait=10"],
            stdout=subprocess.PIPE,
            text=True,
        )
        _until_waiting(api, key)
        show(
            [
                *post,
                *as_producer,
                "-d",
                '{"messages":[{"key":"u3","value":"click /checkout"}]}',
                f"{api}/streams/clicks/messages",
            ]
        )
        print("tail got: " + (waiter.communicate(timeout=30)[0] or "").strip())
        print(f"\nThe vault is running at {api}. OpenAPI: {api}/openapi.json")
        # The key rides in the URL fragment, which the browser keeps to itself (no server log);
        # the page moves it into the tab's sessionStorage at once.
        print(f"  web explorer (signed in with the key, admin): {explorer_url(api, key=key)}")
        print("    (or open /ui/ and sign in with a token: you then see what the token may read)")
        print(f"  function key (admin on every stream): export VAULT_KEY={key}")
        mint = '{"sub": "me", "roles": ["Vault.Read.All"]}'
        print(f"  mint a token: curl -s -X POST {issuer.url}/token -d '{mint}'")
        print(f"  then: vault --url {api} --token TOKEN streams   (docs/SECURITY.md, docs/CLIENT.md)")
        if args.exit:
            return
        print("Press Ctrl-C to stop.", flush=True)
        while True:
            signal.pause()  # until SIGTERM or SIGINT: _stop_on_signal leaves through finally
    finally:
        if waiter:
            waiter.kill()  # in our process group, which a signal sent to us alone misses
            waiter.wait()
        host.stop()
        azurite.stop()
        issuer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m vault_local")
    sub = parser.add_subparsers(dest="command", required=True)
    h = sub.add_parser("host", help="run function_app.py like `func start` (needs storage settings)")
    h.add_argument("--port", type=int, default=7071)
    h.add_argument(
        "--settings",
        type=Path,
        default=ROOT / "local.settings.json",
        help="local.settings.json whose Values become environment variables",
    )
    h.add_argument(
        "--inflight-visibility",
        type=float,
        default=15.0,
        help="seconds a queue message stays invisible while its function runs (renewed every third)",
    )
    h.add_argument(
        "--drain-grace",
        type=float,
        help="seconds a stopping host (SIGTERM, SIGINT) waits for the invocations in flight "
        "(default: vault_local.host.DRAIN_GRACE)",
    )
    h.add_argument(
        "--body-grace",
        type=float,
        help="seconds a request body may take before it must arrive at 240 bytes/s, else 408 "
        "(default: vault_local.http_limits.BODY_GRACE_SECONDS, Kestrel's)",
    )
    h.add_argument("--host-json", type=Path, help="use this host.json instead of the app's (tests)")
    h.add_argument(
        "--fault",
        choices=["after-drain", "after-commit"],
        help="test seam: the first workers stop at this point to be killed (not their replacements)",
    )
    h.add_argument(
        "--instance-per-process",
        action="store_true",
        help="benchmark baseline: no instance id for the workers, so a replacement waits out the "
        "leases of a worker that died (docs/ARCHITECTURE.md §3.7)",
    )
    h.add_argument(
        "--round-robin-queues",
        action="store_true",
        help="benchmark: queue invocations go to the live workers in turn, as the Functions host "
        "sends them, instead of one worker per queue function (vault_local.workers.QueueAffinity)",
    )
    h.add_argument(
        "--fresh-workers",
        action="store_true",
        help="benchmark baseline: no worker template, so a new spare or a replacement starts as a "
        "fresh interpreter, as the Functions host starts a worker (vault_local.template)",
    )
    h.add_argument(
        "--wake-pollers-on-write",
        action="store_true",
        help="tests: each write request wakes the idle queue pollers, so that a test host polls "
        "idle queues seldom without a POST's ?wait= waiting out the back-off (Azure's host does not)",
    )
    d = sub.add_parser("demo", help="start Azurite and the host, then produce and consume with curl")
    d.add_argument("--port", type=int, default=7071)
    d.add_argument("--exit", action="store_true", help="stop after the demo instead of serving")
    d.add_argument("--data", type=Path, default=ROOT / ".azurite", help="Azurite's data directory")
    sub.add_parser("issuer", help="a development token issuer on loopback (see --help)", add_help=False)
    if sys.argv[1:2] == ["issuer"]:
        from vault_local.dev_issuer import main as issuer_main

        issuer_main(sys.argv[2:])
        return
    args = parser.parse_args()
    if args.command == "host":
        check_worker_counts(args.settings)  # before the app's import, which takes a CPU-second
        from vault_local.host import DRAIN_GRACE, run
        from vault_local.http_limits import BODY_GRACE_SECONDS

        run(
            args.port,
            args.settings,
            args.inflight_visibility,
            args.fault,
            args.host_json,
            drain_grace=DRAIN_GRACE if args.drain_grace is None else args.drain_grace,
            body_grace=BODY_GRACE_SECONDS if args.body_grace is None else args.body_grace,
            instance_per_process=args.instance_per_process,
            round_robin_queues=args.round_robin_queues,
            wake_pollers_on_write=args.wake_pollers_on_write,
            fresh_workers=args.fresh_workers,
        )
    else:
        demo(args)


if __name__ == "__main__":
    main()
