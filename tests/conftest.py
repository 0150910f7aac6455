"""Shared fixtures: one real Azurite for the session, started and stopped by the tests.

Under pytest-xdist (``./dev test`` runs three workers) the session's Azurite, development
issuer and host are the run's: the controller starts them once for every worker
(tests/helpers/shared_servers.py). Other session fixtures are per worker; the Spark tests all
run on one of them (WHOLE_MODULES), with one Spark session.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import bicep, precompile, timeline, unicode_tables
from helpers.host_template import RunTemplate, forked, use_the_runs
from helpers.shared_servers import WORKER_INPUT, Attached, SharedServers

from vault_core.azure import StorageAccount
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch
from vault_local.azurite import ROOT, Azurite
from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess


def _end_leftover_servers() -> None:
    """At exit, an interrupted one too: end what this process started in sessions of their own
    (Azurite, hosts with their language workers) and is still running.

    A test's own cleanup stops them, but under xdist a Ctrl-C'd worker has 5 s before execnet
    interrupts that cleanup again, and 10 s before it is killed: a host's graceful stop may take
    longer. After a run that was not interrupted there is nothing left to end.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C or SIGTERM must not cut this short
        signal.signal(sig, signal.SIG_IGN)
    leaders = []
    for child in psutil.Process().children():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(child.pid) == child.pid and child.status() != psutil.STATUS_ZOMBIE:
                leaders.append(child)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for leader in leaders:
            with contextlib.suppress(OSError):
                os.killpg(leader.pid, sig)  # the whole session: a host's workers too
        _, leaders = psutil.wait_procs(leaders, timeout=3)
        if not leaders:
            return


def _interrupted_by_sigterm(signum: int, frame: object) -> None:
    """A SIGTERM ends this process as a Ctrl-C does (what CI or a supervisor sends to stop a run):
    pytest winds the run up, and :func:`_end_leftover_servers` runs at exit. Python's own default
    ends the process at once, which left the session's Azurite running without it."""
    raise KeyboardInterrupt(f"signal {signum}")


atexit.register(_end_leftover_servers)
if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _interrupted_by_sigterm)


WHOLE_MODULES = frozenset(
    {
        "tests/test_spark.py",
        "tests/test_access.py",
        "tests/test_access_http.py",
        "tests/test_poison.py",
        "tests/test_explorer.py",
        "tests/test_long_polls.py",
        "tests/test_outages.py",
        "tests/test_acknowledged.py",
        "tests/test_http_limits.py",
        "tests/test_layers.py",
        "tests/test_infra.py",
    }
)
"""Modules whose tests all run on one xdist worker, because each worker running some of them
would start its own copy of what they share: a Spark session (a JVM), a host of their own (an
Azurite too, for the outage tests; a host behind a fault proxy; one with small HTTP limits), a
Chromium with Playwright's driver, the project's parsed sources (test_layers), the Bicep files'
syntax trees (test_infra).
Every other test is a unit of its own."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N`` (``--dist load``): whole modules for WHOLE_MODULES, single tests otherwise.

    Not ``--dist loadgroup`` with ``xdist_group`` marks: with pytest 9.2 its marks are
    silently ignored (pytest-dev/pytest-xdist#1386). The largest unit is sent first, then the
    tests in the order collected (slow ones first, below)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WholeModulesOrSingleTests(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in WHOLE_MODULES else nodeid

    return WholeModulesOrSingleTests(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the slow tests first: their long waits start at once and the many short
    tests fill in around them, instead of one worker finishing alone with a slow test picked
    up last. (Each worker collects; the scheduler follows their order.)"""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting built (the test modules and their items, the libraries they import: about
    190,000 objects) lives as long as the process: out of the cyclic garbage collector's sight
    (``gc.freeze``), so that its full collections, which Hypothesis's tests set off again and
    again, do not walk all of it each time (the GC's CPU in those tests halves). The collector is
    off while collecting (pytest_configure) and on again from here: its three full collections and
    400 young ones as collecting built all that cost ~0.4 CPU-s a worker, and they found ~17,000
    objects of garbage, ~2 MiB, which are frozen with the rest instead."""
    gc.freeze()
    gc.enable()


@pytest.fixture(scope="session", autouse=True)
def one_tls_context() -> Iterator[None]:
    """The httpx clients the tests make (about 260 a run, on loopback HTTP) share one default TLS
    context: each would otherwise load certifi's CA bundle again, ~35 ms of CPU every time."""
    from httpx._transports import default

    original = default.create_ssl_context
    shared = original()

    def create(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        plain = verify is True and cert is None and trust_env
        return shared if plain else original(verify=verify, cert=cert, trust_env=trust_env)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(default, "create_ssl_context", create)
        yield


def pytest_configure(config: pytest.Config) -> None:
    """On the controller of xdist workers: the servers every worker shares (SharedServers), and
    the template the tests' hosts are forked from (tests/helpers/host_template.py); on a worker,
    where to find that template.
    With ``MV_TEST_TIMELINE=FILE``: where the run's time and CPU went (tests/helpers/timeline.py).
    Then, while those servers start, what every worker would otherwise compute as it collects,
    once for all: the test modules' rewritten bytecode (tests/helpers/precompile.py), the
    parsed Bicep files (tests/helpers/bicep.py) and Hypothesis's Unicode tables
    (tests/helpers/unicode_tables.py)."""
    timeline.register(config)
    if hasattr(config, "workerinput"):
        use_the_runs(config.workerinput)
    elif (config.getoption("numprocesses", None) or 0) > 0:
        config.pluginmanager.register(RunTemplate(), "mv-host-template")  # the session host's too
        config.pluginmanager.register(SharedServers(session_host), "mv-shared-servers")
        unicode_tables.start(config)
        precompile.rewrite_test_modules(config)
        bicep.parse_all(config)
    else:  # a process that collects: the collector is off until it has (pytest_collection_finish)
        gc.disable()


def attached(config: pytest.Config) -> Attached | None:
    """On an xdist worker, the servers of the run (SharedServers); None with ``-n 0``."""
    shared = getattr(config, "workerinput", {}).get(WORKER_INPUT)
    return Attached(shared) if shared else None


@pytest.fixture(scope="session")
def azurite(pytestconfig: pytest.Config) -> Iterator[Azurite]:
    """In memory: the session's Azurite is never restarted (the outage tests run their own on
    disk), and it skips rewriting its growing metadata to disk every 5 s."""
    if shared := attached(pytestconfig):
        yield shared.azurite()
        return
    server = Azurite(in_memory=True).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def account(azurite: Azurite) -> StorageAccount:
    return StorageAccount(connection_string=azurite.connection_string)


@pytest.fixture(scope="session")
def vault(account: StorageAccount) -> Vault:
    return Vault(account).ensure()


@pytest.fixture
def stream() -> str:
    """A fresh stream name per test, so tests share one Azurite without sharing data."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def dev_issuer(pytestconfig: pytest.Config) -> Iterator[DevIssuer]:
    """The development token issuer on loopback: the hosts trust it, tests mint its tokens."""
    if shared := attached(pytestconfig):
        yield shared.issuer()
        return
    with DevIssuer() as issuer:
        yield issuer


FAST_POLLING_INTERVAL = "00:00:00.2"
"""The ``maxPollingInterval`` of the hosts that tests start themselves: an idle queue poller
backs off to 200 ms instead of the product's 2 s, so a message that did not come through the
host's own write requests (which wake its pollers) is taken at once: one a killed host left
invisible, another instance's hand-back, one a test put on the queue. Not lower: an idle host
polling its 4 queues every 100 ms costs about 16 % of a core (host and Azurite), every 200 ms
about 8 %. So these hosts poll :data:`OWN_HOST_QUEUES` queue unless a test needs more. The
session's host, idle most of the run, polls as the product does."""

OWN_HOST_QUEUES = 1
"""The staging queues of a host a test starts itself (the product's default is 4): each is
polled every 200 ms while idle. Tests whose behaviour depends on several queues (queue owners,
steering, two hosts sharing the work) ask for them."""


def fast_host_json(**queues: Any) -> dict[str, Any]:
    """The app's host.json with faster queue polling and ``queues`` set: what the tests' hosts run.

    The product's host.json is unchanged; the local host takes this one through ``--host-json``."""
    doc: dict[str, Any] = json.loads((ROOT / "host.json").read_text())
    doc["extensions"]["queues"].update({"maxPollingInterval": FAST_POLLING_INTERVAL, **queues})
    return doc


FAST_RETRY_QUEUES = {"maxDequeueCount": 3, "visibilityTimeout": "00:00:00"}
"""For hosts that tests kill or starve: quick retries, quick poison."""

WAKE_ON_WRITE = "--wake-pollers-on-write"


def write_host_json(directory: Path, *, woken_on_write: bool = False, **queues: Any) -> Path:
    """The tests' host.json; ``woken_on_write``: the product's idle polling, for a host whose own
    write requests wake its pollers (``--wake-pollers-on-write``, as the session host's)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "host.json"
    doc = fast_host_json(**queues)
    if woken_on_write:
        product = json.loads((ROOT / "host.json").read_text())["extensions"]["queues"]
        doc["extensions"]["queues"]["maxPollingInterval"] = product["maxPollingInterval"]
    path.write_text(json.dumps(doc))
    return path


def fast_host(
    connection_string: str,
    directory: Path,
    *,
    settings: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    queues: int = OWN_HOST_QUEUES,
    woken_on_write: bool = False,
) -> HostProcess:
    """A host on the app's own queues (no prefix) with the tests' fast polling (not started);
    ``woken_on_write``: see :func:`isolated_host`."""
    host_json = write_host_json(directory, woken_on_write=woken_on_write)
    wake = (WAKE_ON_WRITE,) if woken_on_write else ()
    return HostProcess(
        connection_string,
        settings={"VAULT_STAGING_QUEUES": str(queues), **(settings or {})},
        args=("--host-json", str(host_json), *wake, *args),
        launch=forked,
    )


SESSION_HOST_QUEUES = 1
"""The session host's staging queues (the product's default is 4): one poller asking Azurite
for messages, not four. That the catalog and /health list every queue is proved in process
(test_app_memory.py); the tests that depend on several queues (steering, faults, shutdown)
have hosts of their own."""


def session_host(azurite: Azurite, dev_issuer: DevIssuer) -> HostProcess:
    """The session's host (not started): see :func:`vault_host`. The product's host.json: its
    idle poller asks every 2 s, and the host's write requests wake it (a test seam). Forked from
    the host template as the tests' hosts are (the demo's host starts as a fresh interpreter)."""
    settings = {**dev_issuer.settings(), "VAULT_STAGING_QUEUES": str(SESSION_HOST_QUEUES)}
    return HostProcess(azurite.connection_string, settings=settings, args=(WAKE_ON_WRITE,), launch=forked)


@pytest.fixture(scope="session")
def vault_host(
    pytestconfig: pytest.Config,
    azurite: Azurite,
    dev_issuer: DevIssuer,
) -> Iterator[HostProcess]:
    """The local Functions host running function_app.py on the session's Azurite, with
    authentication on: it trusts ``dev_issuer``'s tokens, and ``.key`` is a function key with
    admin (so read and write) on every stream; :data:`SESSION_HOST_QUEUES` staging queues.

    ``.url`` is the API base (``http://127.0.0.1:PORT/api``), ``.key`` the function key,
    ``.connection_string`` the Azurite it uses. Every xdist worker's tests share it: no test
    stops it (a host that is down is a refusing port, as in test_client_http.py).
    """
    if shared := attached(pytestconfig):
        yield shared.host()
        return
    host = session_host(azurite, dev_issuer).start()
    yield host
    host.stop()


@functools.cache
def app_http_functions() -> list[Any]:
    """The HTTP functions of function_app.py, read once: azure-functions refuses to list an
    app's functions a second time in one process (it sees each name as a duplicate)."""
    import function_app
    from vault_local.routes import discover

    return discover(function_app.app)[0]


def wait_until(check: Callable[[], object], timeout: float = 30, what: str = "condition") -> None:
    """Poll ``check`` until it is true: for what only storage or another thread can tell (no
    event announces it). A positive signal, unlike a sleep that hopes something has happened."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for the {what}"
        time.sleep(0.02)


def commit_directly(vault: Vault, stream: str, value: bytes) -> int:
    """Append one message to ``stream`` from the test process, not through a host, and release
    the stream; the committed end. For a test whose host cannot take a POST at that moment, or
    whose host must hold no lease of the stream."""
    with vault.writer(stream) as w:
        [done] = w.append([Batch([NewMessage(value, "")])])
    return done.next_offset


def still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes that still run. A zombie has ended: only its exit status is left, for its
    parent to collect (PID 1 for orphans, in its own time: over a second in some containers)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def key_header(host: HostProcess) -> dict[str, str]:
    """The header that authenticates as ``host.key`` (admin on every stream)."""
    return {"x-functions-key": host.key}


def isolated_host(
    azurite: Azurite,
    tmp_path: Path,
    *args: str,
    prefix: str | None = None,
    settings: dict[str, str] | None = None,
    queues: int = OWN_HOST_QUEUES,
    woken_on_write: bool = False,
) -> HostProcess:
    """A host of its own, on ``queues`` staging queues of its own, so killing it disturbs no
    other test. ``woken_on_write``: its idle pollers ask every 2 s, as the product's, and its own
    write requests wake them (as the session host's): for a test whose messages all come through
    its own requests (no kill, hand-back or other instance whose messages it must take at once).

    Authentication is on: ``.key`` has admin on every stream (see :class:`HostProcess`)."""
    host_json = write_host_json(tmp_path, woken_on_write=woken_on_write, **FAST_RETRY_QUEUES)
    own = {"VAULT_QUEUE_PREFIX": prefix or f"q{uuid.uuid4().hex[:8]}", "VAULT_STAGING_QUEUES": str(queues)}
    wake = (WAKE_ON_WRITE,) if woken_on_write else ()
    return HostProcess(
        azurite.connection_string,
        settings={**own, **(settings or {})},
        args=("--host-json", str(host_json), "--inflight-visibility", "3", *wake, *args),
        launch=forked,
    )
