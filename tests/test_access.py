"""Every route x every kind of caller, in process: the app's access decisions.

The handlers function_app.py binds to each route, called with the headers each caller sends, on a
runtime of their own with authentication on and memory storage (tests/test_app_memory.py shows
the pattern); the tokens are the development issuer's, checked by the app's real validation
(signature against the issuer's published keys, issuer, audience, expiry). The policy is the
table's (tests/helpers/access_table.py).

Each cell asserts the status, that a refusal is a JSON error (with its ``WWW-Authenticate``
challenge) with nothing of the stream's data in it, and that a refused write left nothing
behind. What only a host proves (that each route reaches this handler, that credentials and the
challenge cross real HTTP) is tests/test_access_http.py.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

import pytest
from conftest import app_http_functions
from helpers.access_table import (
    ANONYMOUS_READ,
    CREDENTIALS,
    MINIMAL,
    NOT_FOUND,
    OK,
    POLICY,
    ROUTES,
    Answer,
    bearer,
    check_refusal,
    credentials,
    expected,
    fill,
)

from vault_app import api, explorer_api, poison_api, ui
from vault_app.batches import batch_id_for
from vault_app.config import load_settings
from vault_app.envelope import encode_messages
from vault_app.http import Request, Response
from vault_app.runtime import Runtime
from vault_app.services import Services
from vault_app.writer_fn import StagingMessage, write_staged
from vault_core.memory import MemoryAccount
from vault_core.recordformat import NewMessage
from vault_local.dev_issuer import DevIssuer

SECRET = "secret-payload-" + uuid.uuid4().hex
"""The one message in the orders stream: no refused request may show it."""
ADMIN_KEY, PRODUCER_KEY = secrets.token_urlsafe(24), secrets.token_urlsafe(24)

Handler = Callable[[Runtime, Request], Awaitable[Response]]
BINDINGS = {
    "POST messages": "api.post_messages",
    "GET messages": "api.get_messages",
    "GET log": "api.get_log",
    "GET stream": "api.get_stream",
    "GET access": "api.get_access",
    "GET streams": "api.list_streams",
    "GET stream batch": "api.get_stream_batch",
    "GET batch": "api.get_batch",
    "GET poison": "poison_api.list_poison",
    "POST poison/replay": "poison_api.replay_poison",
    "GET health": "api.health",
    "GET whoami": "api.whoami",
    "GET openapi.json": "api.openapi",
    "GET rates": "explorer_api.get_rates",
    "GET groups": "explorer_api.get_groups",
    "GET ui": "ui.serve",
}
"""The handler function_app.py calls for each route of the table."""
MODULES = {"api": api, "poison_api": poison_api, "explorer_api": explorer_api, "ui": ui}
HANDLERS: dict[str, Handler] = {
    name: getattr(MODULES[where.split(".")[0]], where.split(".")[1]) for name, where in BINDINGS.items()
}


def test_each_route_of_the_table_is_bound_to_its_handler_in_function_app() -> None:
    """What this module calls is what function_app.py calls for the route (and the table has
    every route of the app); over HTTP, tests/test_access_http.py shows each route reaches it."""
    functions = app_http_functions()
    bound = {(m, f.route): inspect.getsource(f.fn) for f in functions for m in f.methods}
    assert set(bound) == {(r.method, r.function_route) for r in ROUTES.values()}
    assert {f.auth_level for f in functions} == {"anonymous"}  # the app checks, not the front end
    for name, route in ROUTES.items():
        assert f"await {BINDINGS[name]}(runtime, " in bound[(route.method, route.function_route)], name


@dataclass(frozen=True)
class Setup:
    runtime: Runtime
    orders: str
    billing: str
    public: str
    batch_id: str
    credentials: dict[str, dict[str, str]]


def request(runtime: Runtime, handler: Handler, headers: dict[str, str], **parts: Any) -> Answer:
    """One request as function_app.py hands it to the handler (lower-case header names)."""

    async def run() -> Response:
        return await handler(runtime, Request(headers={k.lower(): v for k, v in headers.items()}, **parts))

    response = asyncio.run(run())
    body = response.body.decode("utf-8", errors="replace")
    return Answer(
        response.status, {k.lower(): v for k, v in response.headers.items()}, body, response.mimetype
    )


def commit_staged(runtime: Runtime) -> None:
    """What the Functions host does for the writer: every staged message, once, then deleted."""
    for queue in runtime.services.queues:
        while received := queue.staging.receive(1, 60):
            m = received[0]
            write_staged(runtime, queue, StagingMessage(m.id, m.body, 1, m.receipt))
            queue.staging.delete(m)


@pytest.fixture(scope="module")
def setup(dev_issuer: DevIssuer) -> Iterator[Setup]:
    account = MemoryAccount()
    env = {
        **dev_issuer.settings(),
        "VAULT_STAGING_QUEUES": "1",
        "VAULT_FUNCTION_KEYS": json.dumps({"local": ADMIN_KEY, "producer": PRODUCER_KEY}),
        "VAULT_ACCESS_POLICY": json.dumps(POLICY),
        "VAULT_ANONYMOUS_READ": ANONYMOUS_READ,
    }
    runtime = Runtime(Services(load_settings(env), connect=lambda _name: account))
    runtime.services.ensure()
    who = credentials(dev_issuer.mint, ADMIN_KEY, PRODUCER_KEY)
    suffix = uuid.uuid4().hex[:8]
    orders, billing, public = f"orders-{suffix}", f"billing-{suffix}", f"public-{suffix}"
    try:
        batch_ids = {}
        for stream, value in ((orders, SECRET), (billing, "billing data"), (public, "public data")):
            body = json.dumps({"messages": [{"value": value}]}).encode()
            staged = request(
                runtime,
                api.post_messages,
                who["admin key"],
                method="POST",
                route={"stream": stream},
                body=body,
            )
            assert staged.status == 202, staged
            batch_ids[stream] = staged.json()["batch_id"]
        commit_staged(runtime)
        yield Setup(runtime, orders, billing, public, batch_ids[orders], who)
    finally:
        runtime.close()


def call(s: Setup, route: str, who: str, headers: dict[str, str] | None = None) -> tuple[Answer, str]:
    r = ROUTES[route]
    names = {"orders": s.orders, "batch_id": s.batch_id, "who": f"written-by-{who}"}
    idempotency = f"{route}-{who}-{uuid.uuid4().hex}"
    body = json.dumps(fill(r.body, names)).encode() if r.body is not None else b""
    answer = request(
        s.runtime,
        HANDLERS[route],
        {**s.credentials[who], "Idempotency-Key": idempotency, **(headers or {})},
        method=r.method,
        route=fill(r.params, names),
        query=fill(r.query, names),
        body=body,
    )
    return answer, idempotency


def as_admin(s: Setup, name: str, **parts: Any) -> Answer:
    return request(s.runtime, HANDLERS[name], s.credentials["admin key"], **parts)


def stream_values(s: Setup, stream: str) -> set[str]:
    page = as_admin(s, "GET messages", method="GET", route={"stream": stream}, query={"from": "0"})
    return {m["value"] for m in page.json()["messages"]}


@pytest.mark.parametrize("who", CREDENTIALS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_for_every_caller(setup: Setup, route: str, who: str) -> None:
    want = expected(route, who)
    answer, idempotency = call(setup, route, who)
    if want in (401, 403, NOT_FOUND):
        # A 404 may echo the batch id it was asked for, never the stream's name or data.
        hidden = (SECRET, setup.orders) if want == NOT_FOUND else (SECRET, setup.batch_id)
        check_refusal(answer, want, who, hidden)
        if route == "POST messages":  # nothing was staged or written
            batch = batch_id_for(setup.orders, idempotency, None)
            status = as_admin(
                setup, "GET stream batch", method="GET", route={"stream": setup.orders, "id": batch}
            )
            assert status.status == 404, status
        return
    assert 200 <= answer.status < 300, answer
    check_content(setup, route, who, answer, minimal=want == MINIMAL)


def check_content(s: Setup, route: str, who: str, r: Answer, *, minimal: bool) -> None:
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
        if prefix:  # only what the caller may read
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
        assert r.mimetype.startswith("text/html") and SECRET not in r.text
    elif route == "GET whoami":
        kind = r.json()["principal"]["kind"]
        assert kind == {"no credential": "anonymous", "forged Easy Auth header": "anonymous"}.get(
            who, "key" if "key" in who else "token"
        )


def test_refused_writes_left_nothing_in_the_stream(setup: Setup) -> None:
    for who in CREDENTIALS:
        call(setup, "POST messages", who)
    commit_staged(setup.runtime)
    allowed = {w for w in CREDENTIALS if expected("POST messages", w) == OK}
    assert allowed == {"key without the permission", "admin key", "admin token"}  # the table's premise
    assert stream_values(setup, setup.orders) == {SECRET} | {f"written-by-{w}" for w in allowed}


# -- anonymous reading, an operator's opt-in --------------------------------------------------------
def test_anonymous_read_only_of_the_opted_in_patterns(setup: Setup) -> None:
    def anonymous(route: str, stream: str, **parts: Any) -> Answer:
        return request(setup.runtime, HANDLERS[route], {}, route={"stream": stream}, **parts)

    read = anonymous("GET messages", setup.public, method="GET", query={"from": "0"})
    assert read.status == 200 and read.json()["messages"][0]["value"] == "public data"
    assert anonymous("GET access", setup.public, method="GET").status == 200
    listed = {
        d["stream"] for d in request(setup.runtime, api.list_streams, {}, method="GET").json()["streams"]
    }
    assert setup.public in listed and all(name.startswith("public-") for name in listed)
    post = anonymous("POST messages", setup.public, method="POST", body=b'{"messages": [{"value": "x"}]}')
    assert post.status == 401
    assert anonymous("GET messages", setup.orders, method="GET").status == 401
    # Signing in never takes away what everybody has.
    reader = setup.credentials["read-only principal"]
    got = request(setup.runtime, api.get_messages, reader, method="GET", route={"stream": setup.public})
    assert got.status == 200


# -- direct blob access -------------------------------------------------------------------------------
def test_a_sas_is_read_only_for_the_stream_alone_and_never_outlives_the_callers_token(
    setup: Setup, dev_issuer: DevIssuer
) -> None:
    token = dev_issuer.mint("oid-reader", roles=["Orders.Reader"], lifetime=120)
    exp = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["exp"]
    r = request(setup.runtime, api.get_access, bearer(token), method="GET", route={"stream": setup.orders})
    assert r.status == 200, r
    expires = datetime.fromisoformat(r.json()["expires"])
    assert expires.timestamp() <= exp
    sas = dict(parse_qsl(r.json()["sas"]))
    assert sas["se"] == expires.strftime("%Y-%m-%dT%H:%M:%SZ") and sas["sp"] == "r" and sas["sr"] == "b"
    assert r.json()["blob_url"].endswith(f"/{setup.orders}")
    # A key has no expiry: the configured 15 minutes.
    long = as_admin(setup, "GET access", method="GET", route={"stream": setup.orders}).json()
    assert datetime.fromisoformat(long["expires"]).timestamp() - time.time() > 14 * 60


def test_whoami_shows_the_effective_permissions(setup: Setup) -> None:
    billing = setup.credentials["principal of another stream pattern"]
    doc = request(setup.runtime, api.whoami, billing, method="GET").json()
    assert doc["principal"]["id"] == "oid-billing" and doc["principal"]["groups"] == ["grp-billing"]
    assert doc["permissions"] == {
        "read": ["billing-*", "public-*"],
        "write": ["billing-*"],
        "admin": ["billing-*"],
    }
    anon = request(setup.runtime, api.whoami, {}, method="GET").json()
    assert anon["principal"]["kind"] == "anonymous" and anon["permissions"]["read"] == ["public-*"]


def test_a_scoped_admin_may_handle_the_poison_of_its_streams_only(setup: Setup) -> None:
    billing_admin = setup.credentials["principal of another stream pattern"]
    ok = request(
        setup.runtime, poison_api.list_poison, billing_admin, method="GET", query={"stream": setup.billing}
    )
    assert ok.status == 200, ok
    everything = request(setup.runtime, poison_api.list_poison, billing_admin, method="GET")
    assert everything.status == 403 and "every stream" in everything.json()["message"]


def test_a_scoped_admin_hears_nothing_of_other_streams_poison(setup: Setup) -> None:
    """The poison queues hold every stream's batches: an admin of billing-* gets neither their
    counts nor how many of another stream's batches a replay passed over."""
    (queue,) = setup.runtime.services.queues
    message = encode_messages("b-other", setup.orders, int(time.time() * 1000), [NewMessage(b"x", "k")])
    parked = queue.poison.send(message)
    try:
        billing_admin = setup.credentials["principal of another stream pattern"]
        scope = {"stream": setup.billing}
        listed = request(
            setup.runtime, poison_api.list_poison, billing_admin, method="GET", query=scope
        ).json()
        assert listed["messages"] == [] and listed["queues"] == [] and listed["truncated"] is False
        replay = request(setup.runtime, poison_api.replay_poison, billing_admin, method="POST", query=scope)
        assert replay.status == 200 and replay.json()["skipped"] == 0, replay
        everything = as_admin(setup, "GET poison", method="GET", query=scope).json()
        assert sum(q["poison_messages"] or 0 for q in everything["queues"]) >= 1  # admin of *: counts
    finally:  # the poison queue as it was: an admin's replay in another test must not find it
        for m in queue.poison.receive(32, 1):
            if m.id == parked.id:
                queue.poison.delete(m)
            else:
                queue.poison.hide(m, 0)


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
