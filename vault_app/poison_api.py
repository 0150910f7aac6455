"""The operator routes over the poison queues (docs/API.md "Poison queues"); the logic is in
:mod:`vault_app.poison`. Both need ``admin``: on the stream of ``?stream=``, or on every stream
without it (poison queues are shared by all streams).
"""

from __future__ import annotations

from vault_app import poison
from vault_app.auth.policy import Action
from vault_app.guard import Caller, on_some_stream, secured
from vault_app.http import HttpError, Request, Response, guarded_for, json_response
from vault_app.runtime import Runtime
from vault_core.names import validate_batch_id, validate_stream_name

POISON_BUDGET_SECONDS = 20.0
"""Storage budget of one poison request: a replay stops starting new work well before
(``poison.REPLAY_WORK_SECONDS``) and stays under the 30 s that clients commonly wait."""
PARAMETERS = ("stream", "batch")
IGNORED = ("code",)
"""The function key may come as ``?code=``; it is the credential, not a filter."""


def _selector(req: Request, caller: Caller) -> poison.Selector:
    """The filters of the query; an unknown parameter is refused rather than ignored, because
    ignoring a mistyped filter would widen a replay to every poisoned batch."""
    unknown = sorted(set(req.query) - set(PARAMETERS) - set(IGNORED))
    if unknown:
        raise HttpError(
            400,
            "bad_request",
            f"unknown query parameter {unknown[0]!r}; the filters are {' and '.join(PARAMETERS)}",
        )
    empty = sorted(name for name in PARAMETERS if req.query.get(name) == "")
    if empty:
        raise HttpError(
            400, "bad_request", f"query parameter {empty[0]} is empty: give a value or leave it out"
        )
    stream = req.query.get("stream")
    batch = req.query.get("batch")
    selector = poison.Selector(
        stream=validate_stream_name(stream) if stream is not None else None,
        batch_id=validate_batch_id(batch) if batch is not None else None,
    )
    if selector.stream is not None:
        caller.require(Action.ADMIN, selector.stream)
    else:
        caller.require_everywhere(Action.ADMIN, "to see every poison queue; or filter with ?stream=")
    return selector


@guarded_for(POISON_BUDGET_SECONDS)
@secured(on_some_stream(Action.ADMIN))
def list_poison(rt: Runtime, req: Request, caller: Caller) -> Response:
    """Peeks (read-only): up to 32 messages per poison queue, with each queue's approximate count."""
    selector = _selector(req, caller)
    listing = poison.list_poison(rt.services, selector)
    return json_response(200, listing.to_json(queues=caller.everywhere(Action.ADMIN)))


@guarded_for(POISON_BUDGET_SECONDS)
@secured(on_some_stream(Action.ADMIN))
def replay_poison(rt: Runtime, req: Request, caller: Caller) -> Response:
    """Bounded work per call; ``complete: false`` asks the caller to call again."""
    selector = _selector(req, caller)
    report = poison.replay(rt.services, selector, shown=lambda s: _administers(caller, s))
    return json_response(200, report.to_json())


def _administers(caller: Caller, stream: str | None) -> bool:
    """Whether a poison message of ``stream`` (None: unreadable) may be counted for the caller:
    an admin of some streams only hears of theirs."""
    return caller.everywhere(Action.ADMIN) or (stream is not None and caller.may(Action.ADMIN, stream))
