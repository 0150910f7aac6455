"""Who may do what on which stream. Pure: no I/O, no clock, no settings lookup.

Three actions, each granted for stream-name patterns (``*`` is a wildcard for any run of
characters, so ``orders-*`` is every stream whose name starts with ``orders-``, and ``*`` is
every stream):

* ``read``: read messages, the raw log, stream info, batch status, a SAS from ``/access``;
* ``write``: produce;
* ``admin``: the poison routes and queue details; it includes ``read`` and ``write`` (as
  Event Hubs' Manage includes Send and Listen), because listing and replaying poisoned
  batches shows and appends stream data anyway.

Permissions come from three places and add up; nothing is ever denied explicitly, so there
is no order to get wrong, and no grant means no access (deny by default):

1. app roles in a token (``Vault.Read.All``, ``Vault.Write.orders-*``, ``Vault.Admin``, ...);
2. the operator's policy (``VAULT_ACCESS_POLICY``), granting to a principal, group, app role,
   client app or named function key;
3. anonymous read patterns (``VAULT_ANONYMOUS_READ``), which apply to every caller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from vault_app.auth.identity import Principal


class Action(str, Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


IMPLIED: dict[Action, frozenset[Action]] = {
    Action.READ: frozenset({Action.READ}),
    Action.WRITE: frozenset({Action.WRITE}),
    Action.ADMIN: frozenset(Action),
}
"""What granting an action grants."""

_PATTERN_TEXT = re.compile(r"[A-Za-z0-9._*-]{1,128}")
"""Stream name characters plus the wildcard; nothing else, so no pattern is ever a regex."""


@dataclass(frozen=True)
class StreamPattern:
    text: str
    regex: re.Pattern[str] = field(compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> StreamPattern:
        if not isinstance(text, str) or not _PATTERN_TEXT.fullmatch(text):
            raise ValueError(
                f"stream pattern {text!r}: use 1-128 of A-Z a-z 0-9 . _ - and * (any characters)"
            )
        regex = re.compile("".join(".*" if ch == "*" else re.escape(ch) for ch in text), re.DOTALL)
        return cls(text, regex)

    @property
    def everything(self) -> bool:
        """Matches every stream: what a permission "on all streams" (queue details) needs."""
        return self.text.strip("*") == ""

    def matches(self, stream: str) -> bool:
        return self.regex.fullmatch(stream) is not None


ALL = StreamPattern.parse("*")


@dataclass(frozen=True)
class Permission:
    action: Action
    streams: StreamPattern


# -- app roles ---------------------------------------------------------------------------------
ROLE_PREFIX = "Vault."
_ROLE_ACTIONS = {"Read": Action.READ, "Write": Action.WRITE, "Admin": Action.ADMIN}


def role_permission(role: str) -> Permission | None:
    """The permission an app role value stands for, or None if it is not one of the vault's.

    ``Vault.<Read|Write|Admin>`` + optionally ``.All`` (every stream) or ``.<pattern>``:
    ``Vault.Read.All``, ``Vault.Write.orders-*``, ``Vault.Admin``. Anything else is some other
    application's role and grants nothing here (it may still be named in the policy).
    """
    if not role.startswith(ROLE_PREFIX):
        return None
    action_name, _, scope = role[len(ROLE_PREFIX) :].partition(".")
    action = _ROLE_ACTIONS.get(action_name)
    if action is None:
        return None
    if scope in ("", "All"):
        return Permission(action, ALL)
    try:
        return Permission(action, StreamPattern.parse(scope))
    except ValueError:
        return None


# -- the operator's policy -----------------------------------------------------------------------
SUBJECT_KINDS = ("principal", "group", "role", "app", "key")
"""What a policy grant can name: an object id (user, service principal, managed identity),
a group object id, an app role value, a client application id, a function key's name."""


@dataclass(frozen=True)
class Grant:
    subject: str
    """One of SUBJECT_KINDS."""
    value: str
    actions: frozenset[Action]
    streams: tuple[StreamPattern, ...]

    def applies_to(self, p: Principal) -> bool:
        if self.subject == "key":
            return p.kind == "key" and p.id == self.value
        if p.kind not in ("token", "easyauth"):
            return False
        if self.subject == "principal":
            return p.id == self.value
        if self.subject == "group":
            return self.value in p.groups
        if self.subject == "role":
            return self.value in p.roles
        return p.app_id == self.value  # "app"


@dataclass(frozen=True)
class Policy:
    grants: tuple[Grant, ...] = ()
    anonymous_read: tuple[StreamPattern, ...] = ()
    """Streams everybody may read, signed in or not (``VAULT_ANONYMOUS_READ``)."""


def parse_grants(text: str) -> tuple[Grant, ...]:
    """``{"grants": [{"role": "Orders.Reader", "allow": ["read"], "streams": ["orders-*"]}, ...]}``.

    Strict on purpose: an unknown field or action is an error, never ignored, because a typo
    ignored could silently grant less (annoying) or, with a misspelt subject, more.
    """
    if not text.strip():
        return ()
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"grants"} or not isinstance(doc["grants"], list):
        raise ValueError('expected {"grants": [...]}')
    return tuple(_grant(i, g) for i, g in enumerate(doc["grants"]))


def _grant(i: int, raw: Any) -> Grant:
    where = f"grant {i}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object")
    subjects = [k for k in SUBJECT_KINDS if k in raw]
    unknown = sorted(set(raw) - set(SUBJECT_KINDS) - {"allow", "streams"})
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}")
    if len(subjects) != 1:
        raise ValueError(f"{where}: name exactly one of {', '.join(SUBJECT_KINDS)}")
    subject = subjects[0]
    value = raw[subject]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {subject} must be a non-empty string")
    allow = raw.get("allow")
    if not isinstance(allow, list) or not allow:
        raise ValueError(f"{where}: allow must be a non-empty list of read, write, admin")
    try:
        actions = frozenset(Action(a) for a in allow)
    except ValueError:
        raise ValueError(f"{where}: allow holds {allow!r}; the actions are read, write, admin") from None
    streams = raw.get("streams")
    if not isinstance(streams, list) or not streams:
        raise ValueError(f'{where}: streams must be a non-empty list of patterns, e.g. ["orders-*"]')
    try:
        patterns = tuple(StreamPattern.parse(s) for s in streams)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return Grant(subject, value.strip(), actions, patterns)


def parse_patterns(text: str) -> tuple[StreamPattern, ...]:
    """A comma-separated list of stream patterns (``public-*, status``); empty: none."""
    return tuple(StreamPattern.parse(p.strip()) for p in text.split(",") if p.strip())


# -- the decision ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Permissions:
    """Everything one principal may do: the union of what its roles, grants and the anonymous
    read patterns give it, with ``admin`` expanded to read and write."""

    entries: tuple[Permission, ...] = ()

    def allows(self, action: Action, stream: str) -> bool:
        return any(p.action == action and p.streams.matches(stream) for p in self.entries)

    def everywhere(self, action: Action) -> bool:
        """On every stream, present and future (a ``*`` grant): needed for what spans streams,
        such as staging queue depths and unfiltered poison routes."""
        return any(p.action == action and p.streams.everything for p in self.entries)

    def somewhere(self, action: Action) -> bool:
        return any(p.action == action for p in self.entries)

    def patterns(self, action: Action) -> list[str]:
        return sorted({p.streams.text for p in self.entries if p.action == action})


def permissions(principal: Principal, policy: Policy) -> Permissions:
    return Permissions(tuple(dict.fromkeys(_expanded(_granted(principal, policy)))))


def _granted(principal: Principal, policy: Policy) -> Iterator[Permission]:
    for pattern in policy.anonymous_read:
        yield Permission(Action.READ, pattern)
    if principal.kind in ("token", "easyauth"):
        for role in sorted(principal.roles):
            found = role_permission(role)
            if found is not None:
                yield found
    for grant in policy.grants:
        if grant.applies_to(principal):
            for action in sorted(grant.actions):
                for pattern in grant.streams:
                    yield Permission(action, pattern)


def _expanded(granted: Iterable[Permission]) -> Iterator[Permission]:
    for p in granted:
        for action in sorted(IMPLIED[p.action]):
            yield Permission(action, p.streams)
