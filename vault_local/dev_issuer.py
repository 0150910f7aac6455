"""A development token issuer on loopback, so that the app's real token validation runs locally.

It makes an RSA key when it starts (nothing is ever written to disk or the repository),
publishes it the way Entra ID does (``/.well-known/openid-configuration`` -> ``jwks_uri``),
and mints RS256 access tokens with whatever subject, roles, groups, audience and lifetime a
test or the demo asks for. The app is pointed at it with the same settings as at Entra ID
(``VAULT_AUTH_ISSUER``, ``VAULT_AUTH_AUDIENCE``; see :meth:`DevIssuer.settings`), and checks
its tokens with the same code: signature against the published keys, issuer, audience,
expiry, not-before.

``POST /token`` mints a token over HTTP (JSON body: ``sub``, ``roles``, ``groups``, ``aud``,
``azp``, ``lifetime``) for curl and other processes. It listens on 127.0.0.1 only: anyone who
can reach it can mint tokens, which is the point of a development issuer and why it must
never be configured in a deployment.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

DEV_AUDIENCE = "api://message-vault-local"
DEFAULT_LIFETIME = 3600


class DevIssuer:
    def __init__(self, port: int = 0, audience: str = DEV_AUDIENCE) -> None:
        self.audience = audience
        self.key_requests = 0
        """How many times the published keys were fetched (the app's cache is tested by it)."""
        self._lock = threading.Lock()
        self.rotate()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @classmethod
    def minting_as(cls, shared: Mapping[str, str]) -> DevIssuer:
        """An issuer that mints the tokens of the one that :meth:`shared` these, in another
        process, and serves nothing itself: several test processes trust one issuer's host."""
        issuer = cls(audience=shared["audience"])
        issuer._server.server_close()
        key = serialization.load_pem_private_key(shared["key"].encode(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        with issuer._lock:
            issuer._key, issuer.kid = key, shared["kid"]
        issuer._url = shared["url"]
        return issuer

    def shared(self) -> dict[str, str]:
        """What :meth:`minting_as` needs: the URL, audience, key id and signing key (PEM). Handed
        to processes on this machine in memory only, like the key itself never written down."""
        with self._lock:
            key, kid = self._key, self.kid
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return {"url": self.url, "audience": self.audience, "kid": kid, "key": pem.decode()}

    # -- keys and tokens ---------------------------------------------------------------------
    def rotate(self) -> str:
        """A new signing key (the old one is no longer published); returns its key id."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        kid = uuid.uuid4().hex
        with self._lock:
            self._key, self.kid = key, kid
        return kid

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            public = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
            kid = self.kid
        return {"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}

    @property
    def url(self) -> str:
        """The issuer (``iss``) of its tokens, and the base of its metadata."""
        return self._url

    def settings(self) -> dict[str, str]:
        """The app settings that make the vault trust this issuer."""
        return {"VAULT_AUTH_ISSUER": self.url, "VAULT_AUTH_AUDIENCE": self.audience}

    def mint(
        self,
        subject: str = "dev-user",
        *,
        roles: Iterable[str] = (),
        groups: Iterable[str] = (),
        app_id: str | None = None,
        audience: str | None = None,
        issuer: str | None = None,
        lifetime: float = DEFAULT_LIFETIME,
        not_before: float | None = None,
        claims: Mapping[str, Any] | None = None,
    ) -> str:
        """An access token shaped like Entra ID's v2 tokens (``oid`` = ``sub`` = ``subject``).

        A negative ``lifetime`` makes an expired token; ``issuer``/``audience`` other than this
        issuer's make tokens the app must refuse; ``claims`` add or (with None) remove claims.
        """
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": issuer or self.url,
            "aud": audience or self.audience,
            "sub": subject,
            "oid": subject,
            "iat": now,
            "nbf": int(not_before) if not_before is not None else now,
            "exp": int(now + lifetime),
            "ver": "2.0",
        }
        if roles:
            payload["roles"] = list(roles)
        if groups:
            payload["groups"] = list(groups)
        if app_id:
            payload["azp"] = app_id
        payload.update(claims or {})
        payload = {k: v for k, v in payload.items() if v is not None}  # None in claims: leave it out
        with self._lock:
            key, kid = self._key, self.kid
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})

    # -- serving -------------------------------------------------------------------------------
    def start(self) -> DevIssuer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="dev-issuer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serving loop: none was started
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> DevIssuer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self._json(
                        200,
                        {
                            "issuer": issuer.url,
                            "jwks_uri": issuer.url + "/keys",
                            "token_endpoint": issuer.url + "/token",
                            "id_token_signing_alg_values_supported": ["RS256"],
                        },
                    )
                elif self.path == "/keys":
                    issuer.key_requests += 1
                    self._json(200, issuer.jwks())
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                if self.path != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                try:
                    length = int(self.headers.get("content-length") or 0)
                    doc = json.loads(self.rfile.read(length) or b"{}")
                    token = issuer.mint(
                        str(doc.get("sub") or "dev-user"),
                        roles=[str(r) for r in doc.get("roles", [])],
                        groups=[str(g) for g in doc.get("groups", [])],
                        app_id=doc.get("azp"),
                        audience=doc.get("aud"),
                        lifetime=float(doc.get("lifetime", DEFAULT_LIFETIME)),
                    )
                except (ValueError, TypeError, AttributeError) as exc:
                    self._json(400, {"error": "bad_request", "message": str(exc)})
                    return
                lifetime = int(float(doc.get("lifetime", DEFAULT_LIFETIME)))
                self._json(200, {"access_token": token, "token_type": "Bearer", "expires_in": lifetime})

            def _json(self, status: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and the demo
                pass

        return Handler


def main(argv: list[str] | None = None) -> None:
    """``python -m vault_local issuer``: serve until Ctrl-C, for ``./dev host`` and scripts."""
    parser = argparse.ArgumentParser(prog="python -m vault_local issuer")
    parser.add_argument("--port", type=int, default=7072)
    parser.add_argument("--audience", default=DEV_AUDIENCE)
    args = parser.parse_args(argv)
    with DevIssuer(args.port, args.audience) as issuer:
        print(f"Development issuer at {issuer.url} (key {issuer.kid}, made now, kept in memory).")
        print("Point the vault at it (local.settings.json or the environment):")
        for name, value in issuer.settings().items():
            print(f"  {name}={value}")
        print("Mint a token:")
        print(
            f'  curl -s -X POST {issuer.url}/token -d \'{{"sub": "me", "roles": ["Vault.Admin"]}}\''
            " | python -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])'"
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
