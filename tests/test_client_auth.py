"""The client's credentials: a key, a token, a token credential; over a mock transport and over
real HTTP against the session host (which trusts the development issuer)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from azure.core.credentials import AccessToken
from click.testing import CliRunner

from vault_client import ApiClient, Consumer, Forbidden, Producer, Unauthorized
from vault_client.auth import REFRESH_BEFORE_SECONDS, auth_for
from vault_client.cli import cli
from vault_core.errors import InvalidInput
from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess

SCOPE = "api://message-vault-local/.default"


class FakeCredential:
    """A token credential (azure-identity's protocol) whose tokens expire when told."""

    def __init__(
        self, issuer: DevIssuer | None = None, roles: tuple[str, ...] = (), lifetime: int = 3600
    ) -> None:
        self.issuer, self.roles, self.lifetime = issuer, roles, lifetime
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes += scopes
        n = len(self.scopes)
        if self.issuer is None:
            return AccessToken(f"token-{n}", int(time.time()) + self.lifetime)
        token = self.issuer.mint(f"client-{n}", roles=self.roles, lifetime=self.lifetime)
        return AccessToken(token, int(time.time()) + self.lifetime)


def recording(
    status: int = 200, challenge: str | None = None, fail_first: int = 0
) -> tuple[list[httpx.Request], httpx.MockTransport, Any]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        # A copy: a retried request is the same object, with new headers.
        seen.append(httpx.Request(request.method, request.url, headers=dict(request.headers)))
        if len(seen) <= fail_first:
            headers = {"WWW-Authenticate": challenge} if challenge else {}
            return httpx.Response(status, json={"error": "unauthorized", "message": "no"}, headers=headers)
        return httpx.Response(200, json={"streams": []})

    return seen, httpx.MockTransport(answer), answer


def test_a_key_travels_in_the_header_never_in_the_url() -> None:
    seen, transport, _ = recording()
    ApiClient("http://vault.test", "k" * 20, transport=transport).streams()
    assert seen[0].headers["x-functions-key"] == "k" * 20
    assert "k" * 20 not in str(seen[0].url) and "authorization" not in seen[0].headers


def test_a_token_is_sent_as_a_bearer() -> None:
    seen, transport, _ = recording()
    ApiClient("http://vault.test", token="Bearer abc", transport=transport).streams()
    assert seen[0].headers["authorization"] == "Bearer abc" and "x-functions-key" not in seen[0].headers


def test_a_credential_is_asked_for_the_scope_once_and_again_before_expiry() -> None:
    seen, transport, _ = recording()
    credential = FakeCredential(lifetime=3600)
    api = ApiClient("http://vault.test", credential=credential, scope=SCOPE, transport=transport)
    api.streams()
    api.streams()
    assert credential.scopes == [SCOPE]  # cached
    assert {r.headers["authorization"] for r in seen} == {"Bearer token-1"}
    credential.lifetime = int(REFRESH_BEFORE_SECONDS) - 10  # the next token is "about to expire"
    api._http.auth._expires = time.time() + 10  # type: ignore[union-attr]
    api.streams()
    assert len(credential.scopes) == 2 and seen[-1].headers["authorization"] == "Bearer token-2"


def test_an_invalid_token_answer_gets_one_fresh_token_and_one_retry() -> None:
    seen, transport, _ = recording(401, 'Bearer realm="message-vault", error="invalid_token"', fail_first=1)
    credential = FakeCredential()
    ApiClient("http://vault.test", credential=credential, scope=SCOPE, transport=transport).streams()
    assert [r.headers["authorization"] for r in seen] == ["Bearer token-1", "Bearer token-2"]


def test_other_401s_and_403s_are_the_answer() -> None:
    seen, transport, _ = recording(401, 'Bearer realm="message-vault"', fail_first=5)
    api = ApiClient("http://vault.test", credential=FakeCredential(), scope=SCOPE, transport=transport)
    with pytest.raises(Unauthorized):
        api.streams()
    assert len(seen) == 1
    forbidden = httpx.Response(403, json={"error": "forbidden", "message": "principal 'x' may not write"})
    api = ApiClient("http://vault.test", token="t", transport=httpx.MockTransport(lambda r: forbidden))
    with pytest.raises(Forbidden, match="may not write"):
        api.streams()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"key": "k", "token": "t"}, "one credential"),
        ({"token": "t", "credential": FakeCredential(), "scope": SCOPE}, "one credential"),
        ({"credential": FakeCredential()}, "needs the app's scope"),
        ({"scope": SCOPE}, "only used with a credential"),
    ],
)
def test_credentials_are_one_of_a_kind(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        auth_for(**kwargs)


def test_a_copy_keeps_the_credential() -> None:
    seen, transport, _ = recording()
    api = ApiClient("http://vault.test", token="t", transport=transport)
    twin = api.copy()
    twin._http._transport = transport  # the copy's own connections, here the same mock
    twin.streams()
    assert seen[0].headers["authorization"] == "Bearer t"


# -- against the session host ---------------------------------------------------------------------
def test_producer_and_consumer_with_a_token_credential(
    vault_host: HostProcess, dev_issuer: DevIssuer, stream: str
) -> None:
    writer = FakeCredential(dev_issuer, roles=("Vault.Write.All",))
    with Producer(vault_host.url, credential=writer, scope=SCOPE, wait=20) as producer:
        producer.send(stream, "signed").result(30)
    reader = FakeCredential(dev_issuer, roles=("Vault.Read.All",))
    got = list(Consumer.connect(vault_host.url, stream, credential=reader, scope=SCOPE))
    assert [m.value for m in got] == [b"signed"]
    with pytest.raises(Forbidden):  # a reader may not write
        ApiClient(vault_host.url, credential=reader, scope=SCOPE).produce(
            stream, b'{"messages": [{"value": "x"}]}', idempotency_key="k"
        )
    with pytest.raises(Unauthorized):  # and nobody reads without a credential
        ApiClient(vault_host.url).read(stream)


def test_cli_with_a_token_and_whoami(vault_host: HostProcess, dev_issuer: DevIssuer, stream: str) -> None:
    runner = CliRunner()
    token = dev_issuer.mint("cli-user", roles=["Vault.Read.All", "Vault.Write.orders-*"])
    env = {"VAULT_URL": vault_host.url, "VAULT_TOKEN": token, "VAULT_KEY": None}
    shown = runner.invoke(cli, ["whoami"], env=env)
    assert shown.exit_code == 0, shown.stderr
    assert "token principal cli-user" in shown.stdout and "write: orders-*" in shown.stdout
    doc = json.loads(runner.invoke(cli, ["whoami", "--json"], env=env).stdout)
    assert doc["permissions"] == {"read": ["*"], "write": ["orders-*"], "admin": []}
    refused = runner.invoke(cli, ["produce", stream, "-"], env=env, input="x\n")
    assert refused.exit_code == 1 and "may not write" in refused.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--key", "k" * 20, "--token", "t", "whoami"], "give one credential"),
        (["--use-azure-credential", "whoami"], "needs the vault's scope"),
    ],
)
def test_cli_credential_usage_errors(vault_host: HostProcess, args: list[str], error: str) -> None:
    env = {"VAULT_URL": vault_host.url, "VAULT_KEY": None, "VAULT_TOKEN": None, "VAULT_SCOPE": None}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2 and error in result.stderr
