"""Every route over real HTTP, with the callers whose answers prove the wiring: the session's
host (authentication on, its function key admin on every stream, the development issuer trusted).

What only a host proves: each route of function_app.py reaches its handler and its access check
(no credential, a refused token and two admins get the table's answers, route by route); the
credentials travel as HTTP headers (``Authorization``, ``x-functions-key``) and the answers' headers
come back (``WWW-Authenticate`` on a 401, ``Cache-Control: no-store`` on a SAS, the media types).
Every access decision, for every kind of caller, is tests/test_access.py, in process.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from helpers.access_table import NOT_FOUND, ROUTES, Answer, check_refusal, credentials, expected, fill

from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess

CALLERS = ["no credential", "expired token", "admin key", "admin token"]
VALUE = "http-" + uuid.uuid4().hex


@dataclass(frozen=True)
class Setup:
    http: httpx.Client
    orders: str
    batch_id: str
    credentials: dict[str, dict[str, str]]


@pytest.fixture(scope="module")
def setup(vault_host: HostProcess, dev_issuer: DevIssuer) -> Iterator[Setup]:
    who = credentials(dev_issuer.mint, vault_host.key, "not-a-key-of-this-host")
    orders = f"orders-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=vault_host.url, timeout=60) as http:
        r = http.post(
            f"/streams/{orders}/messages",
            params={"wait": 20},
            json={"messages": [{"value": VALUE}]},
            headers=who["admin key"],
        )
        assert r.status_code == 200, r.text
        yield Setup(http, orders, r.json()["batch_id"], who)


@pytest.mark.parametrize("who", CALLERS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_reaches_its_handler_and_check(setup: Setup, route: str, who: str) -> None:
    r = ROUTES[route]
    names = {"orders": setup.orders, "batch_id": setup.batch_id, "who": f"written-by-{who}"}
    response = setup.http.request(
        r.method,
        fill(r.path, names),
        params=fill(r.query, names),
        json=fill(r.body, names),
        headers={**setup.credentials[who], "Idempotency-Key": uuid.uuid4().hex},
    )
    answer = Answer(response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.text)
    want = expected(route, who)
    if who == "no credential" and route in ("GET streams", "GET batch"):
        want = 401  # this host opens no stream to anonymous readers
    if want in (401, 403, NOT_FOUND):
        check_refusal(answer, want, who, (VALUE, setup.orders) if want == NOT_FOUND else (VALUE,))
        return
    assert 200 <= answer.status < 300, answer
    media = {"GET ui": "text/html", "GET log": "application/octet-stream"}.get(route, "application/json")
    assert answer.headers["content-type"].startswith(media), answer.headers
    if route == "GET messages":
        assert answer.json()["messages"][0]["value"] == VALUE
    if route == "GET access":
        assert answer.headers["cache-control"] == "no-store" and "sig=" in answer.json()["sas"]
