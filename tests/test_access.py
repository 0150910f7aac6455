"""Every route x every kind of caller, over real HTTP against a host with authentication on.

One host of its own, with this policy (docs/SECURITY.md has the model):

* function key ``local``: admin on every stream; function key ``producer``: write on ``orders-*``;
* app role ``Orders.Reader``: read on ``orders-*``;
* group ``grp-billing``: read, write and admin on ``billing-*``;
* app role ``Vault.Admin`` (built in): admin on every stream;
* anonymous read: ``public-*``.

Each cell asserts the status, that a refusal is a JSON error with nothing of the stream's data
in it, and that a refused write left nothing behind. The tokens that must be refused all claim
``Vault.Admin``, so skipping any check would show up here as a 2xx.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pytest
from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import QueueClient
from conftest import app_http_functions, isolated_host

from vault_app.batches import batch_id_for
from vault_app.envelope import encode_messages
from vault_core.recordformat import NewMessage
from vault_local.azurite import Azurite
from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess

SECRET = "secret-payload-" + uuid.uuid4().hex
"""The one message in the orders stream: no refused request may show it."""


@dataclass(frozen=True)
class Setup:
    host: HostProcess
    http: httpx.Client
    orders: str
    billing: str
    public: str
    batch_id: str
    credentials: dict[str, dict[str, str]]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tampered(token: str) -> str:
    """Someone else's valid token with the claims edited: the signature no longer matches."""
    head, payload, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["roles"] = ["Vault.Admin"]
    return f"{head}.{base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b'=').decode()}.{sig}"


def forged_easy_auth() -> str:
    claims = [{"typ": "oid", "val": "oid-ops"}, {"typ": "roles", "val": "Vault.Admin"}]
    return base64.b64encode(json.dumps({"auth_typ": "aad", "claims": claims}).encode()).decode()


CREDENTIALS = [
    "no credential",
    "forged Easy Auth header",
    "expired token",
    "wrong audience",
    "wrong issuer",
    "tampered signature",
    "key without the permission",
    "read-only principal",
    "principal of another stream pattern",
    "admin key",
    "admin token",
]


@pytest.fixture(scope="module")
def setup(
    azurite: Azurite, dev_issuer: DevIssuer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    producer_key = secrets.token_urlsafe(24)
    policy = {
        "grants": [
            {"key": "local", "allow": ["admin"], "streams": ["*"]},
            {"key": "producer", "allow": ["write"], "streams": ["orders-*"]},
            {"role": "Orders.Reader", "allow": ["read"], "streams": ["orders-*"]},
            {"group": "grp-billing", "allow": ["read", "write", "admin"], "streams": ["billing-*"]},
        ]
    }
    settings = {
        **dev_issuer.settings(),
        "VAULT_ACCESS_POLICY": json.dumps(policy),
        "VAULT_ANONYMOUS_READ": "public-*",
    }
    host = isolated_host(azurite, tmp_path_factory.mktemp("access"), settings=settings)
    host.env["VAULT_FUNCTION_KEYS"] = json.dumps({"local": host.key, "producer": producer_key})
    host.start()
    mint = dev_issuer.mint
    credentials = {
        "no credential": {},
        "forged Easy Auth header": {"X-MS-CLIENT-PRINCIPAL": forged_easy_auth()},
        "expired token": bearer(mint("oid-ops", roles=["Vault.Admin"], lifetime=-3600)),
        "wrong audience": bearer(mint("oid-ops", roles=["Vault.Admin"], audience="api://another-app")),
        "wrong issuer": bearer(mint("oid-ops", roles=["Vault.Admin"], issuer="https://login.example/other")),
        "tampered signature": bearer(tampered(mint("oid-reader", roles=["Orders.Reader"]))),
        "key without the permission": {"x-functions-key": producer_key},
        "read-only principal": bearer(mint("oid-reader", roles=["Orders.Reader"])),
        "principal of another stream pattern": bearer(mint("oid-billing", groups=["grp-billing"])),
        "admin key": {"x-functions-key": host.key},
        "admin token": bearer(mint("oid-ops", roles=["Vault.Admin"])),
    }
    suffix = uuid.uuid4().hex[:8]
    orders, billing, public = f"orders-{suffix}", f"billing-{suffix}", f"public-{suffix}"
    try:
        with httpx.Client(base_url=host.url, timeout=60) as http:
            admin = credentials["admin key"]
            for stream, value in ((orders, SECRET), (billing, "billing data"), (public, "public data")):
                r = http.post(
                    f"/streams/{stream}/messages",
                    params={"wait": 20},
                    json={"messages": [{"value": value}]},
                    headers=admin,
                )
                assert r.status_code == 200, r.text
                if stream == orders:
                    batch_id = r.json()["batch_id"]
            yield Setup(host, http, orders, billing, public, batch_id, credentials)
    finally:
        host.stop()


# -- the table ---------------------------------------------------------------------------------------
OK, MINIMAL, NOT_FOUND = "ok", "ok, nothing about data", "404"

BAD = {"expired token", "wrong audience", "wrong issuer", "tampered signature"}
ADMINS = {"admin key", "admin token"}


def expected(route: str, who: str) -> str | int:
    """The answer each caller must get from each route."""
    if route in ("GET openapi.json", "GET ui"):
        return OK  # documentation and the explorer's files: open to all, credentials not even looked at
    if who in BAD:
        return 401  # a credential that is not acceptable is refused everywhere, /health included
    anonymous = who in ("no credential", "forged Easy Auth header")
    if route == "GET health":
        return OK if who in ADMINS else MINIMAL
    if route == "GET whoami":
        return OK
    if anonymous:  # the operator opened public-* to everybody, and nothing else
        if route == "GET streams":
            return OK  # the public-* streams only
        if route == "GET batch":
            return NOT_FOUND  # an orders batch does not exist for it
        return 401
    if who in ADMINS:
        return OK
    needs = {
        "POST messages": "write",
        "GET poison": "admin",
        "POST poison/replay": "admin",
    }.get(route, "read")
    if who == "key without the permission":  # write on orders-* only (and read on public-*)
        if route in ("GET streams", "GET batch"):
            return {"GET streams": OK, "GET batch": NOT_FOUND}[route]  # as for anonymous callers
        return OK if needs == "write" else 403
    if who == "read-only principal":  # read on orders-* only
        return OK if needs == "read" else 403
    if who == "principal of another stream pattern":  # everything, but on billing-* only
        if route == "GET streams":
            return OK  # a listing of billing-* streams, without the orders stream
        if route == "GET batch":
            return NOT_FOUND  # an orders batch does not exist for it
        return 403
    raise AssertionError(who)


ROUTES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "POST messages": ("POST", "/streams/{orders}/messages", {"json": {"messages": [{"value": "{who}"}]}}),
    "GET messages": ("GET", "/streams/{orders}/messages", {"params": {"from": 0}}),
    "GET log": ("GET", "/streams/{orders}/log", {}),
    "GET stream": ("GET", "/streams/{orders}", {}),
    "GET access": ("GET", "/streams/{orders}/access", {}),
    "GET streams": ("GET", "/streams", {}),
    "GET stream batch": ("GET", "/streams/{orders}/batches/{batch_id}", {}),
    "GET batch": ("GET", "/batches/{batch_id}", {}),
    "GET poison": ("GET", "/poison", {"params": {"stream": "{orders}"}}),
    "POST poison/replay": ("POST", "/poison/replay", {"params": {"stream": "{orders}"}}),
    "GET health": ("GET", "/health", {}),
    "GET whoami": ("GET", "/whoami", {}),
    "GET openapi.json": ("GET", "/openapi.json", {}),
    "GET rates": ("GET", "/streams/{orders}/rates", {}),
    "GET groups": ("GET", "/streams/{orders}/groups", {}),
    "GET ui": ("GET", "/ui/", {}),
}
FUNCTION_ROUTES = {
    ("POST", "streams/{stream}/messages"),
    ("GET", "streams/{stream}/messages"),
    ("GET", "streams/{stream}/log"),
    ("GET", "streams/{stream}"),
    ("GET", "streams/{stream}/access"),
    ("GET", "streams"),
    ("GET", "streams/{stream}/batches/{id}"),
    ("GET", "batches/{id}"),
    ("GET", "poison"),
    ("POST", "poison/replay"),
    ("GET", "health"),
    ("GET", "whoami"),
    ("GET", "openapi.json"),
    ("GET", "streams/{stream}/rates"),
    ("GET", "streams/{stream}/groups"),
    ("GET", "ui/{*path}"),
}


def test_the_table_covers_every_route_of_the_app() -> None:
    http_functions = app_http_functions()
    assert {(m, f.route) for f in http_functions for m in f.methods} == FUNCTION_ROUTES
    assert len(ROUTES) == len(FUNCTION_ROUTES)
    assert {f.auth_level for f in http_functions} == {"anonymous"}  # the app checks, not the front end


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


def call(s: Setup, route: str, who: str) -> tuple[httpx.Response, str]:
    method, path, options = ROUTES[route]
    names = {"orders": s.orders, "batch_id": s.batch_id, "who": f"written-by-{who}"}
    idempotency = f"{route}-{who}-{uuid.uuid4().hex}"
    headers = {**s.credentials[who], "Idempotency-Key": idempotency}
    r = s.http.request(method, _fill(path, names), headers=headers, **_fill(options, names))
    return r, idempotency


def admin(s: Setup) -> dict[str, str]:
    return s.credentials["admin key"]


@pytest.mark.parametrize("who", CREDENTIALS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_for_every_caller(setup: Setup, route: str, who: str) -> None:
    want = expected(route, who)
    r, idempotency = call(setup, route, who)
    if want in (401, 403):
        assert r.status_code == want, r.text
        assert r.json().keys() == {"error", "message"}
        assert r.json()["error"] == ("unauthorized" if want == 401 else "forbidden")
        assert SECRET not in r.text and setup.batch_id not in r.text
        if want == 401:
            challenge = r.headers["www-authenticate"]
            assert challenge.startswith('Bearer realm="message-vault"')
            assert ('error="invalid_token"' in challenge) is (who in BAD)
            assert "error_description=" in challenge
        if route == "POST messages":  # nothing was staged or written
            batch = batch_id_for(setup.orders, idempotency, None)
            status = setup.http.get(f"/streams/{setup.orders}/batches/{batch}", headers=admin(setup))
            assert status.status_code == 404, status.text
        return
    if want == NOT_FOUND:
        assert r.status_code == 404 and r.json().keys() == {"error", "message"}
        assert setup.orders not in r.text and SECRET not in r.text
        return
    assert 200 <= r.status_code < 300, r.text
    check_content(setup, route, who, r, minimal=want == MINIMAL)


def check_content(s: Setup, route: str, who: str, r: httpx.Response, *, minimal: bool) -> None:
    if route == "GET messages":
        assert [m["value"] for m in r.json()["messages"]][:1] == [SECRET]
    elif route == "GET access":
        assert r.headers["cache-control"] == "no-store" and r.json()["sas"]
    elif route == "GET streams":
        listed = {d["stream"] for d in r.json()["streams"]}
        prefix = {
            "principal of another stream pattern": "billing-",
            "read-only principal": "orders-",
            "no credential": "public-",
            "forged Easy Auth header": "public-",
            "key without the permission": "public-",
        }.get(who)
        if prefix:  # only what the caller may read (other tests' streams share this Azurite)
            assert listed and all(name.startswith((prefix, "public-")) for name in listed), listed
            assert s.public in listed and "queues" not in r.json()
        else:
            assert {s.orders, s.billing} <= listed and "queues" in r.json()
    elif route == "GET health":
        assert r.json()["status"] == "ok"
        assert set(r.json()) == (
            {"status", "version"}
            if minimal
            else {"status", "version", "queues", "poison_messages", "waiting"}
        )
    elif route == "GET rates":
        assert sum(m["messages"] for m in r.json()["rates"]) >= 1  # this hour's messages
    elif route == "GET groups":
        assert r.json()["stream"] == s.orders and r.json()["groups"] == []
    elif route == "GET ui":
        assert r.headers["content-type"].startswith("text/html") and SECRET not in r.text
    elif route == "GET whoami":
        kind = r.json()["principal"]["kind"]
        assert kind == {"no credential": "anonymous", "forged Easy Auth header": "anonymous"}.get(
            who, "key" if "key" in who else "token"
        )


def test_refused_writes_left_nothing_in_the_stream(setup: Setup) -> None:
    for who in CREDENTIALS:
        call(setup, "POST messages", who)
    r = setup.http.get(f"/streams/{setup.orders}/messages", params={"from": 0}, headers=admin(setup))
    values = {m["value"] for m in r.json()["messages"]}
    allowed = {w for w in CREDENTIALS if expected("POST messages", w) == OK}
    assert allowed == {"key without the permission", "admin key", "admin token"}  # the table's premise
    deadline = time.monotonic() + 30
    while not {f"written-by-{w}" for w in allowed} <= values and time.monotonic() < deadline:
        time.sleep(0.3)  # the allowed ones were staged (202): wait for their commits
        r = setup.http.get(f"/streams/{setup.orders}/messages", params={"from": 0}, headers=admin(setup))
        values = {m["value"] for m in r.json()["messages"]}
    assert values == {SECRET} | {f"written-by-{w}" for w in allowed}


# -- anonymous reading, an operator's opt-in --------------------------------------------------------
def test_anonymous_read_only_of_the_opted_in_patterns(setup: Setup) -> None:
    http = setup.http
    r = http.get(f"/streams/{setup.public}/messages", params={"from": 0})
    assert r.status_code == 200 and r.json()["messages"][0]["value"] == "public data"
    assert http.get(f"/streams/{setup.public}/access").status_code == 200
    listed = {d["stream"] for d in http.get("/streams").json()["streams"]}
    assert setup.public in listed and all(name.startswith("public-") for name in listed)
    assert (
        http.post(f"/streams/{setup.public}/messages", json={"messages": [{"value": "x"}]}).status_code == 401
    )
    assert http.get(f"/streams/{setup.orders}/messages").status_code == 401
    # Signing in never takes away what everybody has.
    reader = setup.credentials["read-only principal"]
    assert http.get(f"/streams/{setup.public}/messages", headers=reader).status_code == 200


# -- direct blob access -------------------------------------------------------------------------------
def test_a_sas_never_outlives_the_callers_token(setup: Setup, dev_issuer: DevIssuer) -> None:
    token = dev_issuer.mint("oid-reader", roles=["Orders.Reader"], lifetime=120)
    exp = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["exp"]
    r = setup.http.get(f"/streams/{setup.orders}/access", headers=bearer(token))
    assert r.status_code == 200, r.text
    expires = datetime.fromisoformat(r.json()["expires"])
    assert expires.timestamp() <= exp
    assert f"se={expires.strftime('%Y-%m-%dT%H')}" in r.json()["sas"].replace("%3A", ":")
    # A key has no expiry: the configured 15 minutes.
    long = setup.http.get(f"/streams/{setup.orders}/access", headers=admin(setup)).json()
    assert datetime.fromisoformat(long["expires"]).timestamp() - time.time() > 14 * 60


def test_whoami_shows_the_effective_permissions(setup: Setup) -> None:
    doc = setup.http.get("/whoami", headers=setup.credentials["principal of another stream pattern"]).json()
    assert doc["principal"]["id"] == "oid-billing" and doc["principal"]["groups"] == ["grp-billing"]
    assert doc["permissions"] == {
        "read": ["billing-*", "public-*"],
        "write": ["billing-*"],
        "admin": ["billing-*"],
    }
    anon = setup.http.get("/whoami").json()
    assert anon["principal"]["kind"] == "anonymous" and anon["permissions"]["read"] == ["public-*"]


def test_a_scoped_admin_may_handle_the_poison_of_its_streams_only(setup: Setup) -> None:
    billing_admin = setup.credentials["principal of another stream pattern"]
    ok = setup.http.get("/poison", params={"stream": setup.billing}, headers=billing_admin)
    assert ok.status_code == 200, ok.text
    everything = setup.http.get("/poison", headers=billing_admin)
    assert everything.status_code == 403 and "every stream" in everything.json()["message"]


def test_a_scoped_admin_hears_nothing_of_other_streams_poison(setup: Setup, azurite: Azurite) -> None:
    """The poison queues hold every stream's batches: an admin of billing-* gets neither their
    counts nor how many of another stream's batches a replay passed over."""
    prefix = setup.host.env["VAULT_QUEUE_PREFIX"]
    poison = QueueClient.from_connection_string(azurite.connection_string, f"{prefix}-0-poison")
    with contextlib.suppress(ResourceExistsError):
        poison.create_queue()
    message = encode_messages("b-other", setup.orders, int(time.time() * 1000), [NewMessage(b"x", "k")])
    poison.send_message(message, time_to_live=-1)
    try:
        billing_admin = setup.credentials["principal of another stream pattern"]
        listed = setup.http.get("/poison", params={"stream": setup.billing}, headers=billing_admin).json()
        assert listed["messages"] == [] and listed["queues"] == [] and listed["truncated"] is False
        replay = setup.http.post("/poison/replay", params={"stream": setup.billing}, headers=billing_admin)
        assert replay.status_code == 200 and replay.json()["skipped"] == 0, replay.text
        admin = setup.credentials["admin key"]
        everything = setup.http.get("/poison", params={"stream": setup.billing}, headers=admin).json()
        assert sum(q["poison_messages"] or 0 for q in everything["queues"]) >= 1  # admin of *: counts
    finally:
        poison.clear_messages()


def test_openapi_documents_the_security_of_every_operation() -> None:
    from vault_app.openapi import SPEC, UNSECURED

    assert SPEC["components"]["securitySchemes"]["entraId"] == {
        **SPEC["components"]["securitySchemes"]["entraId"],
        "type": "http",
        "scheme": "bearer",
    }
    for path, operations in SPEC["paths"].items():
        for method, op in operations.items():
            if path in UNSECURED:
                assert op["security"] == [] and "x-vault-permission" not in op
                continue
            assert op["x-vault-permission"], (method, path)
            assert {"entraId": []} in op["security"] and "401" in op["responses"], (method, path)
            if ({} in op["security"]) is False:  # a credential is always needed: 403 is possible
                assert "403" in op["responses"], (method, path)
