"""The operator routes over the poison queues (docs/API.md "Poison queues"); the logic is in
:mod:`vault_app.poison`. Both need the function key; a later change adds real admin roles.
"""

from __future__ import annotations

from vault_app import poison
from vault_app.http import HttpError, Request, Response, guarded_for, json_response
from vault_app.services import services
from vault_core.names import validate_batch_id, validate_stream_name

POISON_BUDGET_SECONDS = 20.0
"""Storage budget of one poison request: a replay stops starting new work well before
(``poison.REPLAY_WORK_SECONDS``) and stays under the 30 s that clients commonly wait."""
PARAMETERS = ("stream", "batch")
IGNORED = ("code",)
"""The function key may come as ``?code=``; it is the host's business, not a filter."""


def _selector(req: Request) -> poison.Selector:
    """The filters of the query; an unknown parameter is refused rather than ignored, because
    ignoring a mistyped filter would widen a replay to every poisoned batch."""
    unknown = sorted(set(req.query) - set(PARAMETERS) - set(IGNORED))
    if unknown:
        raise HttpError(
            400,
            "bad_request",
            f"unknown query parameter {unknown[0]!r}; the filters are {' and '.join(PARAMETERS)}",
        )
    stream = req.query.get("stream") or None
    batch = req.query.get("batch") or None
    return poison.Selector(
        stream=validate_stream_name(stream) if stream is not None else None,
        batch_id=validate_batch_id(batch) if batch is not None else None,
    )


@guarded_for(POISON_BUDGET_SECONDS)
def list_poison(req: Request) -> Response:
    """Peeks (read-only): up to 32 messages per poison queue, with each queue's approximate count."""
    selector = _selector(req)
    return json_response(200, poison.list_poison(services(), selector).to_json())


@guarded_for(POISON_BUDGET_SECONDS)
def replay_poison(req: Request) -> Response:
    """Bounded work per call; ``complete: false`` asks the caller to call again."""
    selector = _selector(req)
    return json_response(200, poison.replay(services(), selector).to_json())
