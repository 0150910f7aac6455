"""How the client proves who it is: a function key, a bearer token, or a token credential.

* ``key``: one of the app's named function keys, sent as ``x-functions-key`` (never in the URL,
  where proxies and logs would keep it);
* ``token``: a bearer token obtained elsewhere (``az account get-access-token``), sent as is;
* ``credential``: anything with azure-identity's ``get_token(scope)`` (``DefaultAzureCredential``,
  a managed identity, a service principal), asked for a token for ``scope``
  (``api://<client-id>/.default``) and again shortly before it expires.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import httpx
from azure.core.credentials import TokenCredential

from vault_core.errors import InvalidInput

REFRESH_BEFORE_SECONDS = 300.0
"""A cached token is replaced this long before it expires, so no request carries one that
expires on the way (azure-identity refreshes on a similar margin)."""


__all__ = ["TokenCredential", "auth_for"]
"""``TokenCredential`` is azure-core's protocol: anything with ``get_token(*scopes)``."""


class KeyAuth(httpx.Auth):
    def __init__(self, key: str) -> None:
        self.key = key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["x-functions-key"] = self.key
        yield request


class StaticTokenAuth(httpx.Auth):
    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


class CredentialAuth(httpx.Auth):
    """Tokens from a credential, cached; thread-safe (a producer's senders share one client).

    A 401 that says the token is invalid (``error="invalid_token"``: expired early, or keys
    rotated) gets one fresh token and one more try; any other 401 is the answer.
    """

    def __init__(self, credential: TokenCredential, scope: str) -> None:
        self.credential = credential
        self.scope = scope
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def token(self, fresh: bool = False) -> str:
        with self._lock:
            if fresh or self._token is None or time.time() > self._expires - REFRESH_BEFORE_SECONDS:
                got = self.credential.get_token(self.scope)
                self._token, self._expires = got.token, float(got.expires_on)
            return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token()}"
        response = yield request
        if response.status_code == 401 and "invalid_token" in response.headers.get("www-authenticate", ""):
            request.headers["Authorization"] = f"Bearer {self.token(fresh=True)}"
            yield request


def auth_for(
    key: str | None = None,
    token: str | None = None,
    credential: TokenCredential | None = None,
    scope: str | None = None,
) -> httpx.Auth | None:
    """The one way in that was given (none: anonymous, for streams opened to everybody)."""
    given = [name for name, value in (("key", key), ("token", token), ("credential", credential)) if value]
    if len(given) > 1:
        raise InvalidInput(f"give one credential, not {' and '.join(given)}")
    if scope and not credential:
        raise InvalidInput("a scope is only used with a credential")
    if key:
        return KeyAuth(key)
    if token:
        return StaticTokenAuth(token.removeprefix("Bearer ").strip())
    if credential:
        if not scope:
            raise InvalidInput("a credential needs the app's scope, e.g. api://<client-id>/.default")
        return CredentialAuth(credential, scope)
    return None
