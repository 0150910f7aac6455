"""The one place in the request path where access is checked.

Every HTTP handler is declared with the rule it needs, and cannot run without it::

    @guarded
    @secured(on_stream(Action.READ))
    def get_messages(rt: Runtime, req: Request, caller: Caller) -> Response: ...

:func:`secured` identifies the caller (401 for a credential that is not acceptable), checks
the rule before the handler touches storage (401 for an anonymous caller, 403 for a principal
without the permission), and hands the handler the :class:`Caller` for what depends on more
than the route (which streams a listing shows, how long a SAS may live).

Status codes: 401 ``unauthorized`` with ``WWW-Authenticate: Bearer ...`` says "who are you?"
(no credential, or one that is not acceptable, with the reason); 403 ``forbidden`` says "you
may not" to a caller the app knows. A route whose stream the caller may not read answers 403
before it looks the stream up, so denial never tells whether a stream exists.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from vault_app.auth import early
from vault_app.auth.identity import Principal
from vault_app.auth.policy import Action, Permissions, permissions
from vault_app.auth.principal import Unauthenticated
from vault_app.auth.tokens import KeysUnavailable
from vault_app.http import RETRY_AFTER_SECONDS, AsyncHandler, Handler, HttpError, Request, Response, in_thread
from vault_app.runtime import Runtime
from vault_core.names import validate_stream_name

log = logging.getLogger("vault_app.auth")

REALM = "message-vault"


@dataclass(frozen=True)
class Caller:
    principal: Principal
    permissions: Permissions

    def may(self, action: Action, stream: str) -> bool:
        return self.permissions.allows(action, stream)

    def everywhere(self, action: Action) -> bool:
        return self.permissions.everywhere(action)

    def require(self, action: Action, stream: str) -> None:
        if not self.may(action, stream):
            raise denied(self, f"{self.principal.describe()} may not {action.value} stream {stream!r}")

    def require_everywhere(self, action: Action, why: str) -> None:
        if not self.everywhere(action):
            raise denied(self, f"{self.principal.describe()} needs {action.value} on every stream (*) {why}")


def _challenge(error: str | None = None, description: str | None = None) -> dict[str, str]:
    parts = [f'realm="{REALM}"']
    if error:
        parts.append(f'error="{error}"')
    if description:
        # Quoted-string: no quotes or backslashes inside, and no control characters.
        clean = "".join(ch for ch in description if ch.isprintable() and ch not in '"\\')
        parts.append(f'error_description="{clean}"')
    return {"WWW-Authenticate": "Bearer " + ", ".join(parts)}


def unauthorized(reason: str, *, invalid_token: bool = False) -> HttpError:
    """401: RFC 6750 puts ``error="invalid_token"`` only on a bearer token that was refused."""
    return HttpError(
        401, "unauthorized", reason, _challenge("invalid_token" if invalid_token else None, reason)
    )


def denied(caller: Caller, message: str) -> HttpError:
    if caller.principal.anonymous:
        return unauthorized(early.MESSAGE)
    log.info("forbidden: %s", message)
    return HttpError(403, "forbidden", message)


# -- identifying the caller ----------------------------------------------------------------------
def caller_of(rt: Runtime, req: Request) -> Caller:
    try:
        principal = rt.authenticator.identify(req.headers, req.query, req.repeated)
    except Unauthenticated as exc:
        log.info("unauthenticated %s %s: %s", req.method, dict(req.route), exc.reason)
        raise unauthorized(exc.reason, invalid_token=exc.bearer) from None
    except KeysUnavailable as exc:
        log.warning("%s", exc)
        raise HttpError(
            503,
            "unavailable",
            "the token issuer's signing keys cannot be fetched; retry later",
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None
    return Caller(principal, permissions(principal, rt.services.settings.auth.policy))


# -- rules ----------------------------------------------------------------------------------------
Rule = Callable[[Caller, Request], None]
"""Raises the 401/403 (or a 400 for a bad stream name) when the caller may not go on."""


def on_stream(action: Action) -> Rule:
    """The route's ``{stream}``: checked before the handler runs, so it reveals nothing."""

    def rule(caller: Caller, req: Request) -> None:
        stream = validate_stream_name(req.route.get("stream", ""))
        caller.require(action, stream)

    rule.__name__ = f"on_stream({action.value})"
    return rule


def on_some_stream(action: Action) -> Rule:
    """Routes that span streams (the listing, a batch by id alone, the poison routes): the
    caller needs ``action`` on at least one stream; the handler narrows the answer to those."""

    def rule(caller: Caller, req: Request) -> None:
        if not caller.permissions.somewhere(action):
            raise denied(caller, f"{caller.principal.describe()} may not {action.value} any stream")

    rule.__name__ = f"on_some_stream({action.value})"
    return rule


def anyone(caller: Caller, req: Request) -> None:
    """Open routes (``/health``): no credential needed, but one that is sent must be valid."""


SecuredHandler = Callable[[Runtime, Request, Caller], Response]
AsyncSecuredHandler = Callable[[Runtime, Request, Caller], Awaitable[Response]]


def secured(rule: Rule) -> Callable[[SecuredHandler | AsyncSecuredHandler], Handler | AsyncHandler]:
    """Check ``rule`` before the handler runs; a coroutine handler stays a coroutine."""

    def wrap(handler: SecuredHandler | AsyncSecuredHandler) -> Handler | AsyncHandler:
        run: Handler | AsyncHandler
        if inspect.iscoroutinefunction(handler):
            coroutine: AsyncSecuredHandler = handler

            async def run_async(rt: Runtime, req: Request) -> Response:
                # A bearer token may need the issuer's signing keys fetched (blocking I/O, rare):
                # off the event loop. Keys and anonymous callers are a few microseconds of CPU.
                bearer = (req.header("authorization") or "").lower().startswith("bearer ")
                caller = await in_thread(rt, caller_of, rt, req) if bearer else caller_of(rt, req)
                rule(caller, req)
                return await coroutine(rt, req, caller)

            run = run_async
        else:
            blocking: SecuredHandler = handler  # type: ignore[assignment]

            def run_blocking(rt: Runtime, req: Request) -> Response:
                caller = caller_of(rt, req)
                rule(caller, req)
                return blocking(rt, req, caller)

            run = run_blocking
        run.__name__ = handler.__name__
        run.__doc__ = handler.__doc__
        return run

    return wrap
