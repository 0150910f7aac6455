"""The access table: every route of the app, every kind of caller, and the answer each must get.

Shared by tests/test_access.py (every cell, in process, on a memory account) and
tests/test_access_http.py (the cells that prove the wiring, over HTTP against a host). The policy
the table assumes (docs/SECURITY.md has the model):

* function key ``local``: admin on every stream; function key ``producer``: write on ``orders-*``;
* app role ``Orders.Reader``: read on ``orders-*``;
* group ``grp-billing``: read, write and admin on ``billing-*``;
* app role ``Vault.Admin`` (built in): admin on every stream;
* anonymous read: ``public-*``.

The tokens that must be refused all claim ``Vault.Admin``, so skipping any check shows as a 2xx.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

POLICY = {
    "grants": [
        {"key": "local", "allow": ["admin"], "streams": ["*"]},
        {"key": "producer", "allow": ["write"], "streams": ["orders-*"]},
        {"role": "Orders.Reader", "allow": ["read"], "streams": ["orders-*"]},
        {"group": "grp-billing", "allow": ["read", "write", "admin"], "streams": ["billing-*"]},
    ]
}
ANONYMOUS_READ = "public-*"

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
BAD = {"expired token", "wrong audience", "wrong issuer", "tampered signature"}
ADMINS = {"admin key", "admin token"}

OK, MINIMAL, NOT_FOUND = "ok", "ok, nothing about data", "404"

Mint = Callable[..., str]


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


def credentials(mint: Mint, admin_key: str, producer_key: str) -> dict[str, dict[str, str]]:
    """The headers each caller of the table sends (``mint`` is the development issuer's)."""
    return {
        "no credential": {},
        "forged Easy Auth header": {"X-MS-CLIENT-PRINCIPAL": forged_easy_auth()},
        "expired token": bearer(mint("oid-ops", roles=["Vault.Admin"], lifetime=-3600)),
        "wrong audience": bearer(mint("oid-ops", roles=["Vault.Admin"], audience="api://another-app")),
        "wrong issuer": bearer(mint("oid-ops", roles=["Vault.Admin"], issuer="https://login.example/other")),
        "tampered signature": bearer(tampered(mint("oid-reader", roles=["Orders.Reader"]))),
        "key without the permission": {"x-functions-key": producer_key},
        "read-only principal": bearer(mint("oid-reader", roles=["Orders.Reader"])),
        "principal of another stream pattern": bearer(mint("oid-billing", groups=["grp-billing"])),
        "admin key": {"x-functions-key": admin_key},
        "admin token": bearer(mint("oid-ops", roles=["Vault.Admin"])),
    }


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


@dataclass(frozen=True)
class Route:
    method: str
    function_route: str
    """The route as function_app.py declares it."""
    path: str
    """The URL under the API base, with ``{orders}``, ``{batch_id}`` and ``{who}`` to fill in."""
    params: dict[str, str] = field(default_factory=dict)
    """The route parameters the Functions host gives the handler for ``path``."""
    query: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None


ORDERS = {"stream": "{orders}"}
ROUTES: dict[str, Route] = {
    "POST messages": Route(
        "POST",
        "streams/{stream}/messages",
        "/streams/{orders}/messages",
        ORDERS,
        body={"messages": [{"value": "{who}"}]},
    ),
    "GET messages": Route(
        "GET", "streams/{stream}/messages", "/streams/{orders}/messages", ORDERS, {"from": "0"}
    ),
    "GET log": Route("GET", "streams/{stream}/log", "/streams/{orders}/log", ORDERS),
    "GET stream": Route("GET", "streams/{stream}", "/streams/{orders}", ORDERS),
    "GET access": Route("GET", "streams/{stream}/access", "/streams/{orders}/access", ORDERS),
    "GET streams": Route("GET", "streams", "/streams"),
    "GET stream batch": Route(
        "GET",
        "streams/{stream}/batches/{id}",
        "/streams/{orders}/batches/{batch_id}",
        {**ORDERS, "id": "{batch_id}"},
    ),
    "GET batch": Route("GET", "batches/{id}", "/batches/{batch_id}", {"id": "{batch_id}"}),
    "GET poison": Route("GET", "poison", "/poison", query={"stream": "{orders}"}),
    "POST poison/replay": Route("POST", "poison/replay", "/poison/replay", query={"stream": "{orders}"}),
    "GET health": Route("GET", "health", "/health"),
    "GET whoami": Route("GET", "whoami", "/whoami"),
    "GET openapi.json": Route("GET", "openapi.json", "/openapi.json"),
    "GET rates": Route("GET", "streams/{stream}/rates", "/streams/{orders}/rates", ORDERS),
    "GET groups": Route("GET", "streams/{stream}/groups", "/streams/{orders}/groups", ORDERS),
    "GET ui": Route("GET", "ui/{*path}", "/ui/", {"path": ""}),
}


def fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    return value


@dataclass(frozen=True)
class Answer:
    """A response, whichever layer gave it: status, headers by lower-case name, body text."""

    status: int
    headers: dict[str, str]
    text: str
    mimetype: str = ""
    """The body's media type where the layer gives it apart from the headers (in process)."""

    def json(self) -> Any:
        return json.loads(self.text)


def check_refusal(answer: Answer, want: str | int, who: str, secrets: tuple[str, ...]) -> None:
    """A 401/403 is a JSON error with the right code and challenge, and tells nothing of the data;
    a 404 likewise."""
    if want == NOT_FOUND:
        assert answer.status == 404 and answer.json().keys() == {"error", "message"}, answer
        assert not any(s in answer.text for s in secrets)
        return
    assert answer.status == want, answer
    assert answer.json().keys() == {"error", "message"}
    assert answer.json()["error"] == ("unauthorized" if want == 401 else "forbidden")
    assert not any(s in answer.text for s in secrets)
    if want == 401:
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="message-vault"')
        assert ('error="invalid_token"' in challenge) is (who in BAD)
        assert "error_description=" in challenge
