"""The credential of a request, checked, as a :class:`~vault_app.auth.identity.Principal`.

One credential per request, from the first of these that applies:

1. ``X-MS-CLIENT-PRINCIPAL``, only when ``VAULT_EASY_AUTH=true``: App Service Authentication
   has validated the caller and passes it in this header (and strips the header from what
   clients send). Without that setting the header is ignored, since a client can send any
   header it likes.
2. ``Authorization: Bearer <token>``: an Entra ID (OpenID Connect) access token, validated by
   :mod:`vault_app.auth.tokens`.
3. A function key, ``x-functions-key: <key>`` or ``?code=<key>``: one of the named keys of
   ``VAULT_FUNCTION_KEYS``, compared in constant time.
4. Nothing: the anonymous principal (which may read only what ``VAULT_ANONYMOUS_READ`` opens).

A bearer token together with a key is refused rather than one silently winning, and so are
two keys that may disagree (``x-functions-key`` and ``?code=`` naming different keys, or
``?code=`` given twice): every credential that is sent counts, and one that is not acceptable
is a 401 even beside one that is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Collection, Mapping
from typing import Any

from vault_app.auth.identity import ANONYMOUS, Principal
from vault_app.auth.tokens import InvalidToken, TokenValidator

KEY_HEADER = "x-functions-key"
KEY_QUERY = "code"
EASY_AUTH_HEADER = "x-ms-client-principal"
MAX_EASY_AUTH_CHARS = 64 * 1024


class Unauthenticated(Exception):
    """A credential was sent but is not acceptable (401); ``bearer`` if it was a bearer token."""

    def __init__(self, reason: str, *, bearer: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.bearer = bearer


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def match_key(given: str, keys: Mapping[str, str]) -> str | None:
    """The name of the key equal to ``given``, compared in constant time.

    Both sides are hashed first, so ``compare_digest`` compares equal-length values and the
    time taken does not reveal a key's length either; every key is compared, so the time does
    not reveal which one matched.
    """
    probe = _digest(given)
    found: str | None = None
    for name, secret in keys.items():
        if hmac.compare_digest(probe, _digest(secret)) and found is None:
            found = name
    return found


class Authenticator:
    def __init__(
        self,
        *,
        keys: Mapping[str, str],
        tokens: TokenValidator | None,
        easy_auth: bool,
    ) -> None:
        self.keys = dict(keys)
        self.tokens = tokens
        self.easy_auth = easy_auth

    def identify(
        self,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        repeated: Collection[str] = (),
    ) -> Principal:
        """``headers`` with lower-case names; ``repeated``: the query parameters the URL names
        more than once (``query`` holds one value of each). Raises :class:`Unauthenticated`, or
        ``KeysUnavailable`` when a token cannot be checked because the issuer is unreachable."""
        key = _one_key(headers.get(KEY_HEADER), query.get(KEY_QUERY), KEY_QUERY in repeated)
        if self.easy_auth and EASY_AUTH_HEADER in headers:
            if key is not None:
                raise Unauthenticated("send one credential: App Service Authentication or a function key")
            return easy_auth_principal(headers[EASY_AUTH_HEADER])
        authorization = headers.get("authorization")
        if authorization is not None and key is not None:
            raise Unauthenticated("send one credential: a bearer token or a function key, not both")
        if authorization is not None:
            return self._bearer(authorization)
        if key is not None:
            name = match_key(key, self.keys)
            if name is None:
                raise Unauthenticated("the function key is not one this app accepts")
            return Principal("key", id=name, name=name)
        return ANONYMOUS

    def _bearer(self, authorization: str) -> Principal:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("use Authorization: Bearer <token>", bearer=True)
        if self.tokens is None:
            raise Unauthenticated(
                "this app accepts no bearer tokens (no issuer and audience are configured)", bearer=True
            )
        try:
            return self.tokens.validate(token.strip())
        except InvalidToken as exc:
            raise Unauthenticated(str(exc), bearer=True) from None


def _one_key(header: str | None, code: str | None, code_repeated: bool) -> str | None:
    """The function key sent, if any; refused when two were sent that may disagree."""
    if code_repeated:
        raise Unauthenticated(f"?{KEY_QUERY}= is given more than once: send one function key, once")
    if header is not None and code is not None and not hmac.compare_digest(_digest(header), _digest(code)):
        raise Unauthenticated(f"{KEY_HEADER} and ?{KEY_QUERY}= name different keys: send one")
    return header if header is not None else code


# -- App Service Authentication ("Easy Auth") ------------------------------------------------------
_OID = ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid")
_SUB = ("http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier", "sub")
_APP = ("azp", "appid")
_GROUPS = ("groups",)
_NAME = ("preferred_username", "name", "upn")


def easy_auth_principal(header: str) -> Principal:
    """The principal of ``X-MS-CLIENT-PRINCIPAL``: base64 of ``{"auth_typ", "claims": [{"typ",
    "val"}], "name_typ", "role_typ"}``; claims may repeat (one ``roles`` claim per role)."""
    if len(header) > MAX_EASY_AUTH_CHARS:
        raise Unauthenticated("X-MS-CLIENT-PRINCIPAL is too long")
    try:
        doc = json.loads(base64.b64decode(header, validate=True))
        claims = [(str(c["typ"]), str(c["val"])) for c in doc["claims"]]
        role_type = str(doc.get("role_typ") or "roles")
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise Unauthenticated("X-MS-CLIENT-PRINCIPAL is not valid base64 JSON with claims") from None

    def all_of(types: tuple[str, ...]) -> list[str]:
        return [v for t, v in claims if t in types]

    def first(types: tuple[str, ...]) -> str | None:
        found = all_of(types)
        return found[0] if found else None

    subject = first(_OID) or first(_SUB)
    if not subject:
        raise Unauthenticated("X-MS-CLIENT-PRINCIPAL names no subject")
    exp: Any = first(("exp",))
    return Principal(
        "easyauth",
        id=subject,
        name=first(_NAME) or "",
        app_id=first(_APP),
        roles=frozenset(all_of((role_type, "roles"))),
        groups=frozenset(all_of(_GROUPS)),
        expires=float(exp) if exp and exp.isdigit() else None,
    )
