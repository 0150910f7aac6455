"""Bearer token validation: Entra ID (or any OpenID Connect issuer) access tokens, with PyJWT.

A token is accepted only if all of these hold, each failure with its own reason:

* it is a JWS signed with RS256 (no ``none``, no HMAC: a public key must never be usable as
  a shared secret) by a key the issuer publishes, found by its ``kid``;
* ``iss`` is one of the configured issuers and ``aud`` one of the configured audiences;
* ``exp`` is in the future and ``nbf`` (if present) in the past, give or take
  :data:`CLOCK_SKEW_SECONDS`; ``exp``, ``nbf`` and ``iat`` are JSON numbers (RFC 7519's
  NumericDate: PyJWT would take ``"1795431017"`` as a time too, and then nothing would bound
  the lifetime of what the token is given, such as a SAS);
* it names a subject (``oid`` or ``sub``).

Signing keys come from the issuer's OpenID metadata (``<issuer>/.well-known/openid-configuration``
-> ``jwks_uri``), are cached, and are fetched again when a token names an unknown ``kid``
(the issuer rotated its keys), at most once per :data:`REFRESH_MIN_SECONDS` so that tokens
with made-up key ids cannot make the app hammer the issuer.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import jwt
from jwt import PyJWK, PyJWKSet

from vault_app.auth.identity import Principal

log = logging.getLogger("vault_app.auth")

ALGORITHMS = ("RS256",)
CLOCK_SKEW_SECONDS = 60
"""Leeway for ``exp`` and ``nbf``: clocks of the issuer and of the app's instances differ a little."""
REFRESH_MIN_SECONDS = 30.0
"""An unknown ``kid`` fetches the issuer's keys again at most this often."""
KEYS_MAX_AGE_SECONDS = 24 * 3600.0
"""Keys are fetched again after this long even if every ``kid`` is known (Entra's advice)."""
FETCH_TIMEOUT_SECONDS = 5.0
MAX_TOKEN_CHARS = 16 * 1024
"""Entra tokens are a few KB; anything much longer is refused before parsing."""
TIME_CLAIMS = ("exp", "nbf", "iat")


class InvalidToken(Exception):
    """The token is not acceptable; the message says why (it goes into ``WWW-Authenticate``)."""


class KeysUnavailable(Exception):
    """The issuer's signing keys cannot be fetched: the token may be fine, so not a 401."""


Fetch = Callable[[str], Any]


def check_url(url: str) -> str:
    """HTTPS only, except plain HTTP to a loopback address (the development issuer):
    keys fetched over plain HTTP from elsewhere could be swapped on the way."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname:
        host = parts.hostname
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback:
            return url
    raise ValueError(f"{url!r}: an issuer must be https (plain http only on loopback)")


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(check_url(url), timeout=FETCH_TIMEOUT_SECONDS) as resp:
        return json.loads(resp.read(1024 * 1024))


def metadata_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


class SigningKeys:
    """The issuer's published signing keys by ``kid``; thread-safe (functions run in a pool)."""

    def __init__(
        self,
        issuer: str,
        *,
        fetch: Fetch = fetch_json,
        clock: Callable[[], float] = time.monotonic,
        refresh_min: float = REFRESH_MIN_SECONDS,
        max_age: float = KEYS_MAX_AGE_SECONDS,
    ) -> None:
        self.issuer = issuer
        self.metadata_url = check_url(metadata_url(issuer))
        self._fetch = fetch
        self._clock = clock
        self._refresh_min = refresh_min
        self._max_age = max_age
        self._keys: dict[str, PyJWK] = {}
        self._fetched: float | None = None
        self._lock = threading.Lock()
        self.fetches = 0
        """How many times the keys were fetched (tests and logs)."""

    def get(self, kid: str) -> PyJWK:
        with self._lock:  # one fetch at a time: concurrent requests with a new kid wait for it
            now = self._clock()
            stale = self._fetched is None or now - self._fetched >= self._max_age
            unknown = kid not in self._keys
            may_refetch = self._fetched is None or now - self._fetched >= self._refresh_min
            if stale or (unknown and may_refetch):
                try:
                    self._refresh(now)
                except KeysUnavailable:
                    if kid not in self._keys:
                        raise
                    log.warning("keeping the cached signing keys of %s", self.issuer, exc_info=True)
            key = self._keys.get(kid)
        if key is None:
            raise InvalidToken(f"unknown signing key {kid[:64]!r}: not one the issuer publishes")
        return key

    def _refresh(self, now: float) -> None:
        self._fetched = now  # also on failure: retry after refresh_min, not on every request
        self.fetches += 1
        try:
            meta = self._fetch(self.metadata_url)
            if not isinstance(meta, dict) or meta.get("issuer") != self.issuer:
                raise ValueError(
                    f"its metadata names issuer {meta.get('issuer') if isinstance(meta, dict) else None!r}"
                )
            jwks = self._fetch(check_url(str(meta["jwks_uri"])))
            found = PyJWKSet.from_dict(jwks).keys
        except Exception as exc:
            raise KeysUnavailable(f"cannot fetch the signing keys of {self.issuer}: {exc}") from exc
        self._keys = {
            k.key_id: k
            for k in found
            if k.key_id and k.key_type == "RSA" and (k.public_key_use in (None, "sig"))
        }
        log.info("signing keys of %s: %s", self.issuer, ", ".join(sorted(self._keys)) or "none")


class TokenValidator:
    """Checks bearer tokens of the configured issuers for the configured audiences."""

    def __init__(
        self,
        issuers: Sequence[str],
        audiences: Sequence[str],
        *,
        keys: SigningKeys | None = None,
        leeway: float = CLOCK_SKEW_SECONDS,
    ) -> None:
        if not issuers or not audiences:
            raise ValueError("token validation needs at least one issuer and one audience")
        self.issuers = list(issuers)
        self.audiences = list(audiences)
        # Entra signs v1 (sts.windows.net) and v2 tokens with the same keys, published in the
        # metadata of the first issuer; other issuers: list the one with the metadata first.
        self.keys = keys or SigningKeys(self.issuers[0])
        self.leeway = leeway

    def validate(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken("token too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("malformed token: not a signed JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise InvalidToken(
                f"unsupported signing algorithm {str(header.get('alg'))[:20]!r}; expected RS256"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("the token names no signing key (kid)")
        key = self.keys.get(kid)
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=list(ALGORITHMS),
                audience=self.audiences,
                issuer=self.issuers,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud"], "verify_iat": False},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken("the token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("the token is from an issuer this app does not trust") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature does not verify") from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidToken(f"the token has no {exc.claim} claim") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"malformed token: {exc}") from None
        except (OverflowError, ValueError, TypeError):  # e.g. "exp": 1e400 (JSON allows it)
            raise InvalidToken("malformed token: a time claim is out of range") from None
        check_time_claims(claims)
        return principal_from_claims(claims)


def check_time_claims(claims: dict[str, Any]) -> None:
    """``exp``, ``nbf`` and ``iat``, where present, are finite JSON numbers (RFC 7519 §2)."""
    for name in TIME_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidToken(f"the token's {name} claim is not a number of seconds (RFC 7519 NumericDate)")


def _strings(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def principal_from_claims(claims: dict[str, Any]) -> Principal:
    subject = claims.get("oid") or claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise InvalidToken("the token names no subject (oid or sub)")
    app = claims.get("azp") or claims.get("appid")
    name = claims.get("preferred_username") or claims.get("upn") or claims.get("app_displayname") or ""
    exp = claims.get("exp")
    return Principal(
        "token",
        id=subject,
        name=str(name),
        app_id=str(app) if app else None,
        roles=_strings(claims.get("roles")),
        groups=_strings(claims.get("groups")),
        expires=float(exp) if isinstance(exp, (int, float)) else None,
    )
