"""Poison is operable: list, replay and count poisoned batches (API and CLI), on a real local host.

One host of its own for the module, on one staging queue of its own, so that what these tests
park in poison (and replay) is theirs alone. Batches are parked the way an earlier outage
would have left them: a valid envelope in ``<queue>-poison`` and a ``rejected`` status row.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from azure.data.tables import TableClient, TableServiceClient, UpdateMode
from azure.storage.queue import QueueClient, QueueServiceClient
from click.testing import CliRunner, Result
from conftest import isolated_host, key_header

from vault_app.batches import digest
from vault_app.envelope import encode_messages
from vault_client.cli import cli
from vault_core.recordformat import NewMessage
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

PREFIX = f"qp{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    # What its tests stage goes through its own requests (a replay is a POST): they wake its pollers.
    process = isolated_host(
        azurite, tmp_path_factory.mktemp("poison"), prefix=PREFIX, woken_on_write=True
    ).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def http(host: HostProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=host.url, timeout=60, headers=key_header(host)) as client:
        yield client


@pytest.fixture(scope="module")
def queues(azurite: Azurite) -> QueueServiceClient:
    return QueueServiceClient.from_connection_string(azurite.connection_string)


@pytest.fixture(scope="module")
def poison(host: HostProcess, queues: QueueServiceClient) -> QueueClient:
    return queues.get_queue_client(f"{PREFIX}-0-poison")


@pytest.fixture(scope="module")
def staging(host: HostProcess, queues: QueueServiceClient) -> QueueClient:
    return queues.get_queue_client(f"{PREFIX}-0")


@pytest.fixture(scope="module")
def batch_rows(host: HostProcess, azurite: Azurite) -> TableClient:
    return TableServiceClient.from_connection_string(azurite.connection_string).get_table_client("mvbatches")


@pytest.fixture
def vault(host: HostProcess) -> Any:
    """``vault ARGS...`` against the module's host, key and URL from the environment."""
    runner = CliRunner()
    env = {"VAULT_URL": host.url, "VAULT_KEY": host.key, "VAULT_STORAGE_CONNECTION": None}

    def invoke(*args: str) -> Result:
        return runner.invoke(cli, list(args), env=env, prog_name="vault")

    return invoke


def park(
    poison: QueueClient, rows: TableClient, stream: str, batch_id: str, values: list[str], reason: str
) -> None:
    """A valid inline batch in poison with a ``rejected`` status row, as an outage leaves it."""
    messages = [NewMessage(v.encode(), "k") for v in values]
    poison.send_message(encode_messages(batch_id, stream, int(time.time() * 1000), messages), time_to_live=-1)
    rows.upsert_entity(
        {
            "PartitionKey": batch_id,
            "RowKey": stream,
            "State": "rejected",
            "Reason": reason,
            "Digest": digest(messages),
            "Count": len(messages),
        },
        mode=UpdateMode.MERGE,
    )


def new_id() -> str:
    return f"b-{uuid.uuid4().hex[:12]}"


def listed(http: httpx.Client, host: HostProcess, **filters: str) -> dict[str, Any]:
    r = http.get("/poison", params={"code": host.key, **filters})
    assert r.status_code == 200, r.text
    return dict(r.json())


def replayed(http: httpx.Client, host: HostProcess, **filters: str) -> dict[str, Any]:
    r = http.post("/poison/replay", params={"code": host.key, **filters})
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_status(
    http: httpx.Client, stream: str, batch_id: str, want: str, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc = dict(http.get(f"/streams/{stream}/batches/{batch_id}").json())
        if doc.get("status") == want or time.monotonic() > deadline:
            return doc
        time.sleep(0.05)


def values(http: httpx.Client, stream: str) -> list[str]:
    r = http.get(f"/streams/{stream}/messages", params={"limit": 10_000})
    return [] if r.status_code == 404 else [m["value"] for m in r.json()["messages"]]


def wait_drained(staging: QueueClient, timeout: float = 60) -> None:
    """Until the writer has taken every staged message (appended, or dropped as a duplicate)."""
    deadline = time.monotonic() + timeout
    while staging.get_queue_properties().approximate_message_count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert staging.get_queue_properties().approximate_message_count == 0


def test_a_parked_batch_is_listed_replayed_and_committed_exactly_once(
    http: httpx.Client,
    host: HostProcess,
    poison: QueueClient,
    staging: QueueClient,
    batch_rows: TableClient,
    vault: Any,
    stream: str,
) -> None:
    batch_id = new_id()
    park(poison, batch_rows, stream, batch_id, ["one", "two"], "storage was down")

    [row] = listed(http, host, batch=batch_id)["messages"]
    assert row["valid"] and row["queue"] == f"{PREFIX}-0" and row["account"] == 0
    assert (row["stream"], row["count"], row["claim_check"]) == (stream, 2, False)
    assert (row["status"], row["reason"]) == ("rejected", "storage was down") and row["inserted"] > 0
    shown = vault("poison", "list", "--batch", batch_id)
    assert shown.exit_code == 0, shown.stderr
    assert batch_id in shown.stdout and "rejected" in shown.stdout and "storage was down" in shown.stdout

    done = vault("poison", "replay", "--batch", batch_id)
    assert done.exit_code == 0, done.stderr
    assert f"replayed {batch_id}" in done.stdout and "replayed 1 batch" in done.stdout
    assert batch_rows.get_entity(batch_id, stream)["State"] == "staged"  # no longer rejected
    assert wait_status(http, stream, batch_id, "committed")["status"] == "committed"
    assert values(http, stream) == ["one", "two"]
    assert listed(http, host, batch=batch_id)["messages"] == []

    # Parked again (say a second copy turns up): replaying it appends nothing twice.
    park(poison, batch_rows, stream, batch_id, ["one", "two"], "storage was down")
    again = replayed(http, host, batch=batch_id)
    assert again["replayed"] == 1 and again["complete"]
    wait_drained(staging)
    assert values(http, stream) == ["one", "two"]
    assert wait_status(http, stream, batch_id, "committed")["status"] == "committed"


def test_a_message_that_is_not_a_batch_is_listed_and_never_replayed(
    http: httpx.Client, host: HostProcess, poison: QueueClient, vault: Any, stream: str
) -> None:
    junk = f"not an envelope {uuid.uuid4().hex}"
    poison.send_message(junk, time_to_live=-1)
    unknown_version = json.dumps({"v": 9, "id": new_id(), "stream": stream, "ts": 1, "m": []})
    poison.send_message(unknown_version, time_to_live=-1)

    rows = {r["preview"]: r for r in listed(http, host)["messages"] if not r["valid"]}
    assert junk in rows and "not JSON" in rows[junk]["error"] and rows[junk]["batch_id"] is None
    known = rows[unknown_version]
    assert known["stream"] == stream and "version 9" in known["error"]  # what could be read is shown
    assert "invalid" in vault("poison", "list").stdout

    doc = replayed(http, host)  # everything: the bad ones stay
    invalid = {m["message_id"] for m in doc["invalid_messages"]}
    assert {rows[junk]["message_id"], known["message_id"]} <= invalid
    assert not invalid & {b["message_id"] for b in doc["batches"]}
    after = {r["message_id"] for r in listed(http, host)["messages"]}  # and are visible again at once
    assert {rows[junk]["message_id"], known["message_id"]} <= after
    assert values(http, stream) == []
    cli = vault("poison", "replay", "--stream", stream)
    assert (
        cli.exit_code == 0
        and "not batches stay in poison" in cli.stdout
        and "replayed 0 batches" in cli.stdout
    )


def test_the_stream_filter_replays_only_that_streams_batches_even_past_one_page(
    http: httpx.Client, host: HostProcess, poison: QueueClient, batch_rows: TableClient, vault: Any
) -> None:
    wanted, other = f"want-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    before = poison.get_queue_properties().approximate_message_count or 0
    for i in range(34):  # more than one page (32) ahead of the wanted ones
        park(poison, batch_rows, other, new_id(), [f"o{i}"], "outage")
    mine = [new_id(), new_id()]
    for i, batch_id in enumerate(mine):
        park(poison, batch_rows, wanted, batch_id, [f"w{i}"], "outage")

    doc = listed(http, host)
    assert doc["truncated"] and doc["queues"][0]["peeked"] == 32 and doc["queues"][0]["poison_messages"] >= 36
    assert "vault poison replay reaches them all" in vault("poison", "list").stdout

    done = vault("poison", "replay", "--stream", wanted, "--json")
    assert done.exit_code == 0, done.stderr
    result = json.loads(done.stdout)
    assert sorted(b["batch_id"] for b in result["batches"]) == sorted(mine) and result["complete"]
    for batch_id in mine:
        assert wait_status(http, wanted, batch_id, "committed")["status"] == "committed"
    assert sorted(values(http, wanted)) == ["w0", "w1"]
    assert http.get(f"/streams/{other}").status_code == 404  # nothing of the other stream moved
    assert poison.get_queue_properties().approximate_message_count == before + 34  # all still parked
    # Leave no full page behind: a listing in a later test only sees the 32 oldest messages.
    # A call on a loaded machine may stop before the end of the queue, and says so: call again.
    calls = [replayed(http, host, stream=other)]
    while not calls[-1]["complete"]:
        calls.append(replayed(http, host, stream=other))
    assert sum(c["replayed"] for c in calls) == 34


def test_streams_and_health_show_the_poison_counts(
    http: httpx.Client, host: HostProcess, poison: QueueClient, batch_rows: TableClient, stream: str
) -> None:
    park(poison, batch_rows, stream, new_id(), ["x"], "outage")
    parked = poison.get_queue_properties().approximate_message_count
    [queue] = http.get("/streams").json()["queues"]
    assert queue["queue"] == f"{PREFIX}-0" and queue["poison_messages"] == parked
    assert queue["approximate_messages"] is not None
    health = http.get("/health").json()
    assert health["status"] == "ok" and health["poison_messages"] == parked
    assert health["queues"] == [{"account": 0, "queue": f"{PREFIX}-0", "poison_messages": parked}]


@pytest.mark.parametrize(("method", "path"), [("GET", "/poison"), ("POST", "/poison/replay")])
@pytest.mark.parametrize("auth", [{}, {"code": "wrong"}])
def test_poison_routes_need_the_function_key(
    host: HostProcess, method: str, path: str, auth: dict[str, str]
) -> None:
    r = httpx.request(method, host.url + path, params=auth)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"stream": "bad name"}, "invalid_stream"),
        ({"batch": "a:b"}, "bad_request"),
        ({"streams": "typo"}, "bad_request"),  # a mistyped filter must not widen a replay to everything
    ],
)
def test_bad_filters_get_a_clear_400(
    http: httpx.Client, host: HostProcess, params: dict[str, str], code: str
) -> None:
    for method, path in (("GET", "/poison"), ("POST", "/poison/replay")):
        r = http.request(method, path, params={"code": host.key, **params})
        assert r.status_code == 400 and r.json()["error"] == code, r.text
