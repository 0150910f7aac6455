"""Access control without storage: the policy, token validation, credentials, settings.

Tokens come from the development issuer (``vault_local.dev_issuer``) on loopback, so the
validation code under test is the one that checks Entra ID tokens in Azure.
"""

from __future__ import annotations

import base64
import hmac
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from vault_app.api import sas_expiry
from vault_app.auth import principal as principal_module
from vault_app.auth.identity import ANONYMOUS, Principal
from vault_app.auth.policy import (
    ALL,
    Action,
    Grant,
    Permission,
    Policy,
    StreamPattern,
    parse_grants,
    parse_patterns,
    permissions,
    role_permission,
)
from vault_app.auth.principal import Authenticator, Unauthenticated, easy_auth_principal, match_key
from vault_app.auth.tokens import InvalidToken, KeysUnavailable, SigningKeys, TokenValidator, check_url
from vault_app.batches import BatchTable
from vault_app.config import load_auth
from vault_app.guard import Caller, denied, unauthorized
from vault_app.http import repeated_query_names
from vault_core.memory import MemoryAccount
from vault_core.vault import Vault
from vault_local import host as local_host
from vault_local.dev_issuer import DevIssuer

R, W, A = Action.READ, Action.WRITE, Action.ADMIN


# -- patterns and roles ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "stream", "match"),
    [
        ("*", "anything.at-all_1", True),
        ("orders-*", "orders-eu", True),
        ("orders-*", "orders-", True),
        ("orders-*", "orders", False),
        ("orders-*", "xorders-eu", False),
        ("orders", "orders", True),
        ("orders", "Orders", False),  # stream names are case-sensitive
        ("*-eu", "orders-eu", True),
        ("a.b", "axb", False),  # '.' is a literal, never a regex
        ("*.*", "orders", False),
    ],
)
def test_stream_patterns(pattern: str, stream: str, match: bool) -> None:
    assert StreamPattern.parse(pattern).matches(stream) is match


@pytest.mark.parametrize("bad", ["", "orders/*", "(.*)", "a b", "x" * 129, "[a]"])
def test_a_pattern_is_never_a_regex(bad: str) -> None:
    with pytest.raises(ValueError, match="stream pattern"):
        StreamPattern.parse(bad)


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("Vault.Read.All", (R, "*")),
        ("Vault.Write.All", (W, "*")),
        ("Vault.Admin", (A, "*")),
        ("Vault.Admin.All", (A, "*")),
        ("Vault.Read", (R, "*")),
        ("Vault.Read.orders-*", (R, "orders-*")),
        ("Vault.Write.billing.eu", (W, "billing.eu")),
        ("Vault.Delete.All", None),
        ("vault.read.all", None),  # role values are case-sensitive, as Entra issues them
        ("Orders.Reader", None),
        ("Vault.Read.bad/pattern", None),
    ],
)
def test_app_roles(role: str, expected: tuple[Action, str] | None) -> None:
    found = role_permission(role)
    assert (None if found is None else (found.action, found.streams.text)) == expected


# -- the policy ---------------------------------------------------------------------------------
POLICY = json.dumps(
    {
        "grants": [
            {"role": "Orders.Reader", "allow": ["read"], "streams": ["orders-*"]},
            {"group": "grp-billing", "allow": ["read", "write"], "streams": ["billing-*"]},
            {"principal": "oid-ops", "allow": ["admin"], "streams": ["*"]},
            {"app": "app-ingest", "allow": ["write"], "streams": ["orders-*", "clicks"]},
            {"key": "producer", "allow": ["write"], "streams": ["orders-*"]},
        ]
    }
)


def token(sub: str = "oid-x", **kw: Any) -> Principal:
    return Principal("token", id=sub, **kw)


def perms(p: Principal, anonymous: str = "") -> Any:
    return permissions(p, Policy(parse_grants(POLICY), parse_patterns(anonymous)))


@pytest.mark.parametrize(
    ("who", "action", "stream", "allowed"),
    [
        (token(roles=frozenset({"Orders.Reader"})), R, "orders-1", True),
        (token(roles=frozenset({"Orders.Reader"})), W, "orders-1", False),
        (token(roles=frozenset({"Orders.Reader"})), R, "billing-1", False),
        (token(groups=frozenset({"grp-billing"})), W, "billing-1", True),
        (token(groups=frozenset({"grp-billing"})), A, "billing-1", False),
        (token("oid-ops"), A, "anything", True),
        (token("oid-ops"), R, "anything", True),  # admin includes read ...
        (token("oid-ops"), W, "anything", True),  # ... and write
        (token(app_id="app-ingest"), W, "clicks", True),
        (token(app_id="app-ingest"), W, "clicks-2", False),
        (Principal("key", id="producer"), W, "orders-1", True),
        (Principal("key", id="producer"), R, "orders-1", False),
        (Principal("key", id="oid-ops"), A, "x", False),  # a key named like a principal is not it
        (token("producer"), W, "orders-1", False),  # ... nor a principal named like a key
        (Principal("key", id="k", roles=frozenset({"Vault.Admin"})), A, "x", False),  # keys have no roles
        (token(roles=frozenset({"Vault.Write.clicks*"})), W, "clicks-eu", True),
        (token(), R, "orders-1", False),  # signed in, no grant: nothing
        (ANONYMOUS, R, "orders-1", False),
        (Principal("easyauth", id="oid-ops"), A, "x", True),  # Easy Auth principals match like tokens
    ],
)
def test_permissions(who: Principal, action: Action, stream: str, allowed: bool) -> None:
    assert perms(who).allows(action, stream) is allowed


def test_anonymous_read_is_read_only_and_applies_to_everyone() -> None:
    anon = perms(ANONYMOUS, "public-*, status")
    assert anon.allows(R, "public-x") and anon.allows(R, "status")
    assert not anon.allows(W, "public-x") and not anon.allows(R, "orders-1")
    signed_in = perms(token(), "public-*")
    assert signed_in.allows(R, "public-x")  # signing in never loses what anonymous callers have


def test_everywhere_and_somewhere() -> None:
    ops, reader = perms(token("oid-ops")), perms(token(roles=frozenset({"Orders.Reader"})))
    assert ops.everywhere(A) and not reader.everywhere(R)
    assert reader.somewhere(R) and not reader.somewhere(W)
    assert reader.patterns(R) == ["orders-*"]
    assert not perms(ANONYMOUS).somewhere(R)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[]", "grants"),
        ('{"grants": [], "extra": 1}', "grants"),
        ('{"grants": [{"role": "r", "allow": ["read"], "stream": ["x"]}]}', "unknown field 'stream'"),
        ('{"grants": [{"allow": ["read"], "streams": ["x"]}]}', "exactly one of"),
        ('{"grants": [{"role": "r", "key": "k", "allow": ["read"], "streams": ["x"]}]}', "exactly one of"),
        ('{"grants": [{"role": "r", "allow": ["delete"], "streams": ["x"]}]}', "actions are read"),
        ('{"grants": [{"role": "r", "allow": [], "streams": ["x"]}]}', "allow must be"),
        ('{"grants": [{"role": "r", "allow": ["read"], "streams": []}]}', "streams must be"),
        ('{"grants": [{"role": "r", "allow": ["read"], "streams": ["a/b"]}]}', "stream pattern"),
        ('{"grants": [{"role": "", "allow": ["read"], "streams": ["x"]}]}', "non-empty"),
        ("{nope", "not JSON"),
    ],
)
def test_a_policy_that_is_not_exactly_right_is_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_grants(text)


def test_policy_grants_parse() -> None:
    grants = parse_grants(POLICY)
    assert grants[0] == Grant("role", "Orders.Reader", frozenset({R}), (StreamPattern.parse("orders-*"),))
    assert parse_grants("") == ()
    assert Permission(R, ALL) in permissions(token("oid-ops"), Policy(grants)).entries


# -- settings ------------------------------------------------------------------------------------
TENANT = "11111111-2222-3333-4444-555555555555"
GOOD_KEY = "k" * 16


def test_no_auth_settings_means_keys_and_tokens_are_off_and_nothing_is_granted() -> None:
    auth = load_auth({})
    assert not auth.tokens and auth.keys == {} and auth.policy == Policy() and not auth.easy_auth


def test_a_tenant_trusts_its_v2_and_v1_issuers() -> None:
    auth = load_auth({"VAULT_AUTH_TENANT_ID": TENANT, "VAULT_AUTH_AUDIENCE": "api://vault, cid"})
    assert auth.issuers == (
        f"https://login.microsoftonline.com/{TENANT}/v2.0",
        f"https://sts.windows.net/{TENANT}/",
    )
    assert auth.audiences == ("api://vault", "cid") and auth.tokens


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"VAULT_AUTH_TENANT_ID": TENANT}, "VAULT_AUTH_AUDIENCE is needed"),
        ({"VAULT_AUTH_AUDIENCE": "api://x"}, "needs VAULT_AUTH_TENANT_ID"),
        ({"VAULT_AUTH_TENANT_ID": "contoso.com", "VAULT_AUTH_AUDIENCE": "a"}, "GUID"),
        ({"VAULT_AUTH_ISSUER": "http://issuer.example", "VAULT_AUTH_AUDIENCE": "a"}, "https"),
        ({"VAULT_FUNCTION_KEYS": '{"k": "short"}'}, "at least 16"),
        ({"VAULT_FUNCTION_KEYS": '["k"]'}, "VAULT_FUNCTION_KEYS"),
        ({"VAULT_FUNCTION_KEYS": json.dumps({"a": GOOD_KEY, "b": GOOD_KEY})}, "same secret"),
        ({"VAULT_FUNCTION_KEYS": json.dumps({"a b": GOOD_KEY})}, "key name"),
        ({"VAULT_ACCESS_POLICY": '{"grants": [{"role": "r"}]}'}, "VAULT_ACCESS_POLICY: grant 0"),
        ({"VAULT_ANONYMOUS_READ": "public/*"}, "VAULT_ANONYMOUS_READ"),
        ({"VAULT_EASY_AUTH": "yes"}, "VAULT_EASY_AUTH"),
    ],
)
def test_half_configured_auth_fails_at_start(env: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        load_auth(env)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://login.microsoftonline.com/t/v2.0", True),
        ("http://127.0.0.1:7072", True),
        ("http://localhost:7072", True),
        ("http://[::1]:7072", True),
        ("http://10.0.0.1", False),
        ("http://issuer.example", False),
        ("ftp://127.0.0.1", False),
    ],
)
def test_issuers_are_https_or_loopback(url: str, ok: bool) -> None:
    if ok:
        assert check_url(url) == url
    else:
        with pytest.raises(ValueError):
            check_url(url)


# -- tokens ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def issuer() -> Iterator[DevIssuer]:
    with DevIssuer() as dev:
        yield dev


@pytest.fixture
def validator(issuer: DevIssuer) -> TokenValidator:
    return TokenValidator([issuer.url], [issuer.audience])


def test_a_valid_token_becomes_a_principal(issuer: DevIssuer, validator: TokenValidator) -> None:
    raw = issuer.mint("oid-1", roles=["Vault.Read.All"], groups=["g1"], app_id="client-1", lifetime=600)
    p = validator.validate(raw)
    assert (p.kind, p.id, p.app_id, p.roles, p.groups) == (
        "token",
        "oid-1",
        "client-1",
        frozenset({"Vault.Read.All"}),
        frozenset({"g1"}),
    )
    assert p.expires is not None and abs(p.expires - (time.time() + 600)) < 5


def _tamper(raw: str) -> str:
    head, payload, sig = raw.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["roles"] = ["Vault.Admin"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{sig}"


def _hs256_with_the_public_key(issuer: DevIssuer) -> str:
    """The classic key-confusion forgery: HMAC keyed with the issuer's *public* key."""
    pem = issuer._key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    claims = {"iss": issuer.url, "aud": issuer.audience, "sub": "x", "exp": int(time.time()) + 600}
    header = json.dumps({"alg": "HS256", "kid": issuer.kid, "typ": "JWT"}).encode()
    signing_input = (
        base64.urlsafe_b64encode(header).rstrip(b"=")
        + b"."
        + base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    )
    sig = base64.urlsafe_b64encode(hmac.digest(pem, signing_input, "sha256")).rstrip(b"=")
    return (signing_input + b"." + sig).decode()


def _unsigned(issuer: DevIssuer) -> str:
    claims = {"iss": issuer.url, "aud": issuer.audience, "sub": "x", "exp": int(time.time()) + 600}
    return jwt.encode(claims, "", algorithm="none", headers={"kid": issuer.kid})


REFUSED = [
    ("expired", lambda i: i.mint(lifetime=-3600), "expired"),
    ("not yet valid", lambda i: i.mint(not_before=time.time() + 3600, lifetime=7200), "not valid yet"),
    ("wrong audience", lambda i: i.mint(audience="api://another-app"), "another audience"),
    ("wrong issuer", lambda i: i.mint(issuer="https://login.example/other"), "does not trust"),
    ("tampered", lambda i: _tamper(i.mint(roles=["Vault.Read.All"])), "signature"),
    ("alg none", _unsigned, "unsupported signing algorithm"),
    ("HS256 with the public key", _hs256_with_the_public_key, "unsupported signing algorithm"),
    ("no exp", lambda i: i.mint(claims={"exp": None}), "malformed|exp"),
    ("no subject", lambda i: i.mint(claims={"sub": None, "oid": None}), "subject"),
    # RFC 7519: times are JSON numbers. PyJWT takes "1795431017" as one; the app does not.
    (
        "exp a string",
        lambda i: i.mint(claims={"exp": str(int(time.time()) + 600)}),
        "exp claim is not a number",
    ),
    (
        "nbf a string",
        lambda i: i.mint(claims={"nbf": str(int(time.time()) - 60)}),
        "nbf claim is not a number",
    ),
    ("iat a string", lambda i: i.mint(claims={"iat": str(int(time.time()))}), "iat claim is not a number"),
    ("exp true", lambda i: i.mint(claims={"exp": True}), "exp claim is not a number|expired"),
    ("exp infinite", lambda i: i.mint(claims={"exp": float("inf")}), r"\(exp\)|exp claim"),
    ("garbage", lambda i: "not.a.jwt", "malformed"),
    (
        "unknown kid",
        lambda i: jwt.encode({"a": 1}, i._key, algorithm="RS256", headers={"kid": "nope"}),
        "unknown",
    ),
]


@pytest.mark.parametrize(("case", "make", "reason"), REFUSED, ids=[c for c, _, _ in REFUSED])
def test_tokens_are_refused_with_their_reason(
    issuer: DevIssuer, validator: TokenValidator, case: str, make: Any, reason: str
) -> None:
    with pytest.raises(InvalidToken, match=reason):
        validator.validate(make(issuer))


def test_expiry_has_a_small_clock_skew_leeway(issuer: DevIssuer, validator: TokenValidator) -> None:
    validator.validate(issuer.mint(lifetime=-30))  # 30 s late: within the leeway
    with pytest.raises(InvalidToken, match="expired"):
        validator.validate(issuer.mint(lifetime=-120))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_keys_are_cached_and_fetched_again_for_an_unknown_kid() -> None:
    with DevIssuer() as dev:
        clock = Clock()
        keys = SigningKeys(dev.url, clock=clock, refresh_min=30)
        validator = TokenValidator([dev.url], [dev.audience], keys=keys)
        for _ in range(3):
            validator.validate(dev.mint())
        assert (keys.fetches, dev.key_requests) == (1, 1)  # cached
        dev.rotate()  # the issuer rolls its key: a token with the new kid arrives
        clock.now += 31
        validator.validate(dev.mint())
        assert keys.fetches == 2
        with pytest.raises(InvalidToken, match="unknown signing key"):  # made-up kids ...
            for i in range(20):
                validator.validate(
                    jwt.encode({"a": 1}, dev._key, algorithm="RS256", headers={"kid": f"x{i}"})
                )
        assert keys.fetches == 2  # ... fetch nothing within refresh_min
        clock.now += 24 * 3600  # and keys are fetched again when old, even if every kid is known
        validator.validate(dev.mint())
        assert keys.fetches == 3


def test_an_unreachable_issuer_is_unavailable_but_cached_keys_still_work() -> None:
    dev = DevIssuer().start()
    clock = Clock()
    keys = SigningKeys(dev.url, clock=clock, refresh_min=0)
    validator = TokenValidator([dev.url], [dev.audience], keys=keys)
    raw = dev.mint()
    validator.validate(raw)
    dev.stop()
    clock.now += 25 * 3600  # stale: a fetch is due, and fails
    assert validator.validate(raw).id == "dev-user"
    with pytest.raises(KeysUnavailable):
        validator.validate(jwt.encode({"a": 1}, dev._key, algorithm="RS256", headers={"kid": "new"}))


def test_metadata_of_another_issuer_is_refused(issuer: DevIssuer) -> None:
    keys = SigningKeys(issuer.url + "/")  # metadata at the same place, naming issuer.url, not this
    with pytest.raises(KeysUnavailable, match="names issuer"):
        TokenValidator([issuer.url + "/"], [issuer.audience], keys=keys).validate(issuer.mint())


# -- credentials of a request --------------------------------------------------------------------
KEYS = {"producer": "p" * 20, "ops": "o" * 20}


def authenticator(issuer: DevIssuer, easy_auth: bool = False) -> Authenticator:
    return Authenticator(
        keys=KEYS, tokens=TokenValidator([issuer.url], [issuer.audience]), easy_auth=easy_auth
    )


def easy_auth_header(claims: list[tuple[str, str]]) -> str:
    doc = {
        "auth_typ": "aad",
        "claims": [{"typ": t, "val": v} for t, v in claims],
        "name_typ": "name",
        "role_typ": "roles",
    }
    return base64.b64encode(json.dumps(doc).encode()).decode()


EASY = easy_auth_header(
    [
        ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid-9"),
        ("roles", "Vault.Read.All"),
        ("roles", "Vault.Write.orders-*"),
        ("groups", "g-1"),
        ("azp", "client-9"),
    ]
)


def test_each_credential_becomes_its_principal(issuer: DevIssuer) -> None:
    auth = authenticator(issuer, easy_auth=True)
    assert auth.identify({}, {}) is ANONYMOUS
    assert auth.identify({"x-functions-key": "p" * 20}, {}) == Principal(
        "key", id="producer", name="producer"
    )
    assert auth.identify({}, {"code": "o" * 20}).id == "ops"
    bearer = auth.identify({"authorization": f"Bearer {issuer.mint('oid-2')}"}, {})
    assert (bearer.kind, bearer.id) == ("token", "oid-2")
    easy = auth.identify({"x-ms-client-principal": EASY}, {})
    assert (easy.kind, easy.id, easy.app_id, easy.groups) == (
        "easyauth",
        "oid-9",
        "client-9",
        frozenset({"g-1"}),
    )
    assert easy.roles == {"Vault.Read.All", "Vault.Write.orders-*"}


def test_the_easy_auth_header_is_ignored_unless_configured(issuer: DevIssuer) -> None:
    # Without App Service Authentication in front, that header is whatever the client sent.
    assert authenticator(issuer).identify({"x-ms-client-principal": EASY}, {}) is ANONYMOUS


@pytest.mark.parametrize(
    ("headers", "query", "reason", "bearer"),
    [
        ({"x-functions-key": "wrong-key-wrong-key"}, {}, "not one this app accepts", False),
        ({}, {"code": ""}, "not one this app accepts", False),
        ({"authorization": "Basic dXNlcjpwYXNz"}, {}, "Bearer", True),
        ({"authorization": "Bearer "}, {}, "Bearer", True),
        ({"authorization": "Bearer x.y.z", "x-functions-key": "p" * 20}, {}, "not both", False),
        ({"authorization": "Bearer x.y.z"}, {"code": "p" * 20}, "not both", False),
    ],
)
def test_unacceptable_credentials(
    issuer: DevIssuer, headers: dict[str, str], query: dict[str, str], reason: str, bearer: bool
) -> None:
    with pytest.raises(Unauthenticated, match=reason) as caught:
        authenticator(issuer).identify(headers, query)
    assert caught.value.bearer is bearer


@pytest.mark.parametrize(
    ("headers", "query", "repeated"),
    [
        ({"x-functions-key": "p" * 20}, {"code": "wrong-key-wrong-key"}, ()),  # a wrong code beside
        ({"x-functions-key": "wrong-key-wrong-key"}, {"code": "p" * 20}, ()),
        ({"x-functions-key": "p" * 20}, {"code": "o" * 20}, ()),  # two good keys that disagree
        ({}, {"code": "p" * 20}, ("code",)),  # ?code= twice (the query keeps one of them)
        ({"x-functions-key": ""}, {}, ()),  # sent, empty: not acceptable
    ],
)
def test_every_key_that_is_sent_counts(
    issuer: DevIssuer, headers: dict[str, str], query: dict[str, str], repeated: tuple[str, ...]
) -> None:
    with pytest.raises(Unauthenticated):
        authenticator(issuer).identify(headers, query, repeated)


def test_the_same_key_in_the_header_and_the_query_is_one_credential(issuer: DevIssuer) -> None:
    assert authenticator(issuer).identify({"x-functions-key": "p" * 20}, {"code": "p" * 20}).id == "producer"


def test_easy_auth_beside_a_function_key_is_refused(issuer: DevIssuer) -> None:
    with pytest.raises(Unauthenticated, match="one credential"):
        authenticator(issuer, easy_auth=True).identify({"x-ms-client-principal": EASY}, {"code": "p" * 20})


def test_the_names_a_url_repeats_are_found() -> None:
    assert repeated_query_names("http://h/api/x?code=a&stream=s&code=b") == {"code"}
    assert repeated_query_names("http://h/api/x?code=a&code") == {"code"}
    assert repeated_query_names("http://h/api/x?code=a&b=1") == frozenset()


def test_bearer_tokens_without_an_issuer_are_refused() -> None:
    auth = Authenticator(keys={}, tokens=None, easy_auth=False)
    with pytest.raises(Unauthenticated, match="no bearer tokens"):
        auth.identify({"authorization": "Bearer x.y.z"}, {})


@pytest.mark.parametrize(
    "header", ["%%%", base64.b64encode(b"[]").decode(), easy_auth_header([("groups", "g")])]
)
def test_a_malformed_easy_auth_header_is_401(header: str) -> None:
    with pytest.raises(Unauthenticated, match="X-MS-CLIENT-PRINCIPAL"):
        easy_auth_principal(header)


def test_keys_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(principal_module.hmac, "compare_digest", spy)
    assert match_key("o" * 20, KEYS) == "ops"
    assert len(calls) == len(KEYS)  # every key compared, not only up to the match
    assert {len(a) for a, b in calls} == {len(b) for a, b in calls} == {32}  # digests: equal lengths
    calls.clear()
    monkeypatch.setattr(local_host.hmac, "compare_digest", spy)
    assert local_host.key_matches("local-key", "local-key") and not local_host.key_matches(
        "local-kez", "local-key"
    )
    assert len(calls) == 2


# -- the answers -----------------------------------------------------------------------------------
def test_401_challenges_and_403_refusals() -> None:
    missing = denied(Caller(ANONYMOUS, permissions(ANONYMOUS, Policy())), "x")
    assert missing.status == 401 and missing.code == "unauthorized"
    assert missing.headers["WWW-Authenticate"].startswith('Bearer realm="message-vault"')
    assert "invalid_token" not in missing.headers["WWW-Authenticate"]  # RFC 6750: no error without a token
    bad = unauthorized('the token has "expired"\n', invalid_token=True)
    assert bad.headers["WWW-Authenticate"] == (
        'Bearer realm="message-vault", error="invalid_token", error_description="the token has expired"'
    )
    who = token()
    refused = denied(Caller(who, permissions(who, Policy())), "principal 'oid-x' may not write stream 's'")
    assert (refused.status, refused.code, refused.headers) == (403, "forbidden", {})


def test_a_sas_never_outlives_the_token() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert sas_expiry(now, 15, None) == now + timedelta(minutes=15)
    soon = (now + timedelta(minutes=3)).timestamp()
    assert sas_expiry(now, 15, soon) == now + timedelta(minutes=3)
    assert sas_expiry(now, 15, (now + timedelta(hours=2)).timestamp()) == now + timedelta(minutes=15)


# -- what a caller may not see costs nothing ------------------------------------------------------
def test_a_batch_on_streams_the_caller_may_not_read_is_looked_up_no_further() -> None:
    """``/batches/{id}`` filters the streams before any lookup of their own: an id used only
    on streams the caller may not read costs what an unknown id costs, so the time of the 404
    tells nothing about them."""
    vault = Vault(MemoryAccount()).ensure()
    looked_up: list[str] = []

    def latest_commit(stream: str) -> list[Any]:
        looked_up.append(stream)
        return []

    table = BatchTable(MemoryAccount().table("batches"), vault.index, latest_commit)
    table.table.create_if_missing()
    for stream in ("secret-1", "secret-2", "mine"):
        assert table.reserve(stream, "b-1", "digest", 1, 0) is None
    assert table.reserve("secret-1", "b-2", "digest", 1, 0) is None

    def mine(stream: str) -> bool:
        return stream == "mine"

    assert [s.stream for s in table.find("b-1", mine)] == ["mine"] and looked_up == ["mine"]
    looked_up.clear()
    assert table.find("b-2", mine) == [] and table.find("b-unknown", mine) == [] and looked_up == []
