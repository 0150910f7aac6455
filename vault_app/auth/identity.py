"""The principal: who a request comes from, once its credential has been checked.

Every way in ends here, so the policy (:mod:`vault_app.auth.policy`) matches on one shape
whatever the credential was: an Entra ID token, a function key, the App Service
Authentication ("Easy Auth") header, or nothing at all (anonymous).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["anonymous", "key", "token", "easyauth"]


@dataclass(frozen=True)
class Principal:
    kind: Kind
    id: str = ""
    """Token or Easy Auth: the object id (``oid``), else the subject (``sub``). Key: its name."""
    name: str = ""
    """For logs and ``/whoami`` only (a UPN or app name may change); never matched by the policy."""
    app_id: str | None = None
    """The client application (``azp`` or ``appid``) that asked for the token."""
    roles: frozenset[str] = field(default_factory=frozenset)
    """Entra app roles assigned to the principal (the token's ``roles`` claim)."""
    groups: frozenset[str] = field(default_factory=frozenset)
    """Group object ids (the token's ``groups`` claim, when the app registration emits it)."""
    expires: float | None = None
    """Epoch seconds when the credential stops being valid (a token's ``exp``); None: no end."""

    @property
    def anonymous(self) -> bool:
        return self.kind == "anonymous"

    def describe(self) -> str:
        """One short phrase for logs and error messages; no secret ever appears in it."""
        if self.kind == "anonymous":
            return "an anonymous caller"
        if self.kind == "key":
            return f"function key {self.id!r}"
        return f"principal {self.id!r}" + (f" (app {self.app_id})" if self.app_id else "")


ANONYMOUS = Principal("anonymous")
