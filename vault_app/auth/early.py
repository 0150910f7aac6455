"""What a host may refuse before it reads a request's body: a write that carries no credential.

No route takes a body from an anonymous caller (``VAULT_ANONYMOUS_READ`` opens reads only, and
every POST needs ``write`` or ``admin``), so such a POST gets the same 401 whatever its body
says. Answering it before the body is read keeps an anonymous client from making the host
receive up to 100 MB and pass it to a worker. Only the *absence* of every credential is judged
here; a credential that is sent, good or bad, goes to the app as usual (docs/API.md "Request
limits", which also says what Azure's front end does).
"""

from __future__ import annotations

from collections.abc import Mapping

from vault_app.auth.principal import EASY_AUTH_HEADER, KEY_HEADER, KEY_QUERY

READS = frozenset({"GET", "HEAD", "OPTIONS"})
CREDENTIAL_HEADERS = ("authorization", KEY_HEADER, EASY_AUTH_HEADER)
MESSAGE = "this needs a credential: Authorization: Bearer <token>, or a function key in x-functions-key"


def anonymous_write(method: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """Whether the request writes and carries no credential at all (``headers``: lower-case names)."""
    if method.upper() in READS:
        return False
    return KEY_QUERY not in query and not any(name in headers for name in CREDENTIAL_HEADERS)
