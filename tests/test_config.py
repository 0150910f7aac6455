"""Configuration, connections, sharding and the staging envelope: no storage needed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from vault_app import config, envelope
from vault_app.claimcheck import ClaimChecks, claim_name, is_claim_of
from vault_app.config import load_settings
from vault_app.envelope import EnvelopeError
from vault_app.services import Services
from vault_core.azure import StorageAccount, azurite_connection_string
from vault_core.positive import positive
from vault_core.recordformat import EncodedBatch, NewMessage, decode
from vault_core.stagedunits import StagedUnits, unit_fields
from vault_core.writer import WriterSettings

CONN = azurite_connection_string()


def test_defaults_need_only_the_connections() -> None:
    s = load_settings({})
    assert (s.staging_accounts, s.queues_per_account, s.queue_names[0]) == (1, 4, "mv-staging-0")
    assert s.limits.max_message_bytes == 1024 * 1024
    assert (s.request_budget_seconds, s.unavailable_retry_seconds) == (4.0, 5)


def test_the_storage_timings_tests_shorten_are_settings() -> None:
    s = load_settings({config.REQUEST_BUDGET: "1.5", config.UNAVAILABLE_RETRY: "1"})
    assert (s.request_budget_seconds, s.unavailable_retry_seconds) == (1.5, 1)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        (config.STAGING_QUEUES_PER_ACCOUNT, "four"),
        (config.MAX_BATCH_BYTES, "0"),
        (config.REQUEST_BUDGET, "0"),
        (config.REQUEST_BUDGET, "nan"),
        (config.UNAVAILABLE_RETRY, "0.5"),
    ],
)
def test_a_bad_setting_names_itself(name: str, raw: str) -> None:
    with pytest.raises(ValueError, match=name):
        load_settings({name: raw})


def test_identity_based_connections_use_service_uris_and_the_managed_identity() -> None:
    env = {
        "VaultStorage__blobServiceUri": "https://acct.blob.core.windows.net",
        "VaultStorage__tableServiceUri": "https://acct.table.core.windows.net",
        "VaultStorage__credential": "managedidentity",
        "VaultStorage__clientId": "00000000-0000-0000-0000-000000000001",
    }
    account = StorageAccount.from_settings(env, "VaultStorage")
    assert account.connection_string is None
    assert type(account.credential).__name__ == "ManagedIdentityCredential"
    assert account.blob_service().url.startswith("https://acct.blob.core.windows.net")
    assert account.table_service().url.startswith("https://acct.table.core.windows.net")
    with pytest.raises(ValueError, match="queue service URI"):
        account.queue_service()


def test_a_missing_connection_says_which_settings_to_set() -> None:
    with pytest.raises(ValueError, match=r"VaultStaging0__queueServiceUri"):
        StorageAccount.from_settings({}, "VaultStaging0")


def test_streams_spread_stably_over_every_queue_of_every_staging_account() -> None:
    env = {
        "VaultStorage": CONN,
        "VaultStaging0": CONN,
        "VaultStaging1": CONN,
        config.STAGING_ACCOUNTS: "2",
        config.STAGING_QUEUES_PER_ACCOUNT: "3",
    }
    services = Services(load_settings(env))
    assert [(q.account, q.name) for q in services.queues] == [
        (a, f"mv-staging-{i}") for a in (0, 1) for i in range(3)
    ]
    chosen = {services.queue_for(f"stream-{i}") for i in range(200)}
    assert len(chosen) == 6  # every shard gets streams
    assert services.queue_for("orders") is services.queue_for("orders")


def test_the_inline_envelope_round_trips_text_and_binary() -> None:
    msgs = [NewMessage(b"\x00\xffbin", b"\x01"), NewMessage("tëxt".encode(), "key")]
    env = envelope.decode(envelope.encode_messages("b1", "s", 5, msgs))
    assert (env.batch_id, env.stream, env.received_ms, env.messages) == ("b1", "s", 5, msgs)


def test_envelope_version_2_carries_units_inline_or_points_to_them_and_nothing_else() -> None:
    msgs = [NewMessage(b'{"n":%d}' % i, "k") for i in range(5)] + [NewMessage(b"\x00", b"\xff")]
    body = envelope.encode_claim_body(msgs, 5, WriterSettings())
    inline = envelope.decode(envelope.encode_units("b-1", "orders", 5, body, 6))
    assert isinstance(inline.records, StagedUnits) and inline.claim is None and inline.count == 6
    assert [f for u in inline.records.units for f in unit_fields(u)] == [
        (m.key_bytes()[0], isinstance(m.key, str), m.value) for m in msgs
    ]
    units = envelope.encode_claim("b-1", "orders", 5, claim_name("orders", "b-1"), 3, units=True)
    assert envelope.decode(units).claim is not None and json.loads(units)["v"] == 2
    messages = json.loads(envelope.encode_messages("b-1", "orders", 5, [NewMessage(b"v", "k")]))
    good = json.loads(envelope.encode_units("b-1", "orders", 5, body, 6))
    for doc, why in (
        ({**messages, "v": 2}, "unknown staging envelope version"),  # messages are version 1
        ({**json.loads(units), "v": 3}, "unknown staging envelope version"),
        ({**good, "n": 5}, "inline batch holds 6 messages, the queue message says 5"),
        ({**good, "u": good["u"][:-4]}, "inline batch is corrupt"),
        ({**good, "u": "not base64!"}, "malformed staging envelope"),
        ({k: v for k, v in good.items() if k != "n"}, "malformed staging envelope"),
    ):
        with pytest.raises(EnvelopeError, match=why):
            envelope.decode(json.dumps(doc))


def test_the_writer_reads_only_the_claim_check_blob_of_the_message_s_own_batch() -> None:
    """A queue message naming another batch's blob (or any other blob) is refused before a read:
    it could otherwise make the writer append bytes that were staged for something else."""
    name = claim_name("orders", "b-1")
    assert is_claim_of(name, "orders", "b-1")
    attempt = name.rsplit("/", 1)[1].removesuffix(".records")
    for other in (
        claim_name("orders", "b-2"),
        claim_name("billing", "b-1"),
        f"orders/b-1/../b-2/{attempt}",
        f"orders/b-1/{attempt}",  # no .records
        "orders/b-1/x.records",
        f"orders/b-1/{attempt}.records/extra",
        "orders/b-1.records",
        "",
    ):
        assert not is_claim_of(other, "orders", "b-1"), other

    downloads: list[str] = []

    class Container:
        def download(self, blob: str) -> bytes | None:
            downloads.append(blob)
            return None

    claims = ClaimChecks(Container(), vault=None)  # type: ignore[arg-type]
    stolen = envelope.decode(envelope.encode_claim("b-1", "orders", 5, claim_name("billing", "b-9"), 3))
    with pytest.raises(EnvelopeError, match="not one of batch b-1 on stream orders"):
        claims.load(stolen)
    assert downloads == []


@pytest.mark.parametrize("record_format", [1, 2])
def test_a_claim_check_body_must_hold_the_announced_messages(record_format: int) -> None:
    """As the app's writer writes: version 1 records, or version 2 units (checked whole, their
    payloads too); the writer takes either whatever it writes."""
    settings = WriterSettings(record_format=record_format)
    msgs = [NewMessage(b"v" * 100, "k")] * 3
    ref = envelope.decode(envelope.encode_claim("b2", "s", 5, "b2.records", 3))
    claimed = envelope.decode_claimed(ref, envelope.encode_claim_body(msgs, 5, settings))
    records = claimed.records
    if record_format == 1:
        assert isinstance(records, EncodedBatch) and len(records.starts) == 3
        assert [(m.key, m.value) for m in decode(records.data, 0)[0]] == [(b"k", b"v" * 100)] * 3
    else:
        assert isinstance(records, StagedUnits) and records.messages == 3 and len(records.units) == 1
        assert list(unit_fields(records.units[0])) == [(b"k", True, b"v" * 100)] * 3
    with pytest.raises(EnvelopeError, match="holds 2 messages"):
        envelope.decode_claimed(ref, envelope.encode_claim_body(msgs[:2], 5, settings))
    for at in (-1, 12, 40):  # the last stored byte; a unit's count, its stored bytes
        body = bytearray(envelope.encode_claim_body(msgs, 5, settings))
        body[at] ^= 1
        with pytest.raises(EnvelopeError, match="corrupt"):
            envelope.decode_claimed(ref, bytes(body))


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1]",
        '{"v": 2, "id": "a", "stream": "s", "ts": 1, "m": []}',
        '{"v": 1, "id": "a:b", "stream": "s", "ts": 1, "m": []}',
        '{"v": 1, "id": "a", "stream": "../x", "ts": 1, "m": []}',
        '{"v": 1, "id": "a", "stream": "s", "ts": 1, "m": [["k", false, "!!"]]}',
    ],
)
def test_invalid_envelopes_are_rejected_with_a_reason(text: str) -> None:
    with pytest.raises(EnvelopeError, match=r"."):
        envelope.decode(text)


@pytest.mark.parametrize(
    ("raw", "parse", "top", "want"),
    [
        ("", int, None, 7),
        (" 3 ", int, None, 3),
        ("10", int, 10, 10),
        ("0.5", float, None, 0.5),
        ("11", int, 10, "must be a whole number from 1 to 10, not '11'"),
        ("0", int, None, "must be a whole number of at least 1, not '0'"),
        ("1.5", int, None, "must be a whole number of at least 1"),
        ("nan", float, None, "must be a finite number above 0"),
        ("inf", float, None, "must be a finite number above 0"),
        ("-2", float, None, "must be a finite number above 0"),
    ],
)
def test_positive_numbers_follow_one_rule(raw: str, parse: Any, top: int | None, want: Any) -> None:
    """The one parser of the app's settings, the local host's worker counts and Spark's options."""
    if isinstance(want, str):
        with pytest.raises(ValueError, match=f"^X {re.escape(want)}"):
            positive({"X": raw}, "X", 7, parse, top=top)
    else:
        assert positive({"X": raw}, "X", 7, parse, top=top) == want
