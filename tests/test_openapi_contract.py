"""The OpenAPI document and the app agree: a property-based run generated from the document.

Schemathesis reads the document the app serves (vault_app.openapi) and sends what it generates
from it to the session's local host (``vault_host``, shared with the other host tests) with
all of its checks: no 5xx; every status, content type and documented header as documented;
every JSON answer valid against its schema; a request the document allows is accepted and one
it refuses is refused (a 4xx); a method the document does not name is a 405 with ``Allow``.
Its phases (:data:`RUN`): coverage (each constraint's edges, from the side the app must
refuse), fuzzing (valid requests) and stateful (sequences of calls that use each other's
answers). The run is bounded and deterministic (a fixed seed, a few examples per operation),
so it costs a few CPU-seconds and fails the same way on every run.

The exceptions, each a rule OpenAPI 3.0 cannot state (docs/API.md "The OpenAPI document"),
are the only failures :func:`expected` lets pass: a valid request refused, only with the app's
own answer for that rule:

* ``from`` together with ``at`` (a read): 400, since a parameter cannot exclude another;
* a ``batch_id`` or ``Idempotency-Key`` used before with other messages: 422, since whether
  an id was used is state, not the shape of the request;
* a ``from`` or a ``Range`` that starts past the committed end: 416, and a ``from`` that is
  not a record boundary: 400 ``invalid_offset``, since the end and the boundaries are state;
* a calendar date that does not exist (``2026-02-30``) in ``at``: 400, since a pattern
  cannot count the days of a month;
* a ``value`` or ``key`` with ``encoding: base64`` that is not base64: 400;
* a value or key over its byte limit: 413, since ``maxLength`` counts characters, not the
  bytes of their UTF-8 or of their base64;

a read of a stream that another test damaged on purpose in the shared storage (a bit flip, a
commit-record format from the future; conftest names such streams ``t-`` and 12 hex digits, and
the stateful phase finds them by listing): 500 ``storage_error``, the app's documented answer;

and two of the tool's: a case it calls positive although it generated a part of it to violate
the document (Schemathesis 4.32's coverage phase does so with a ``Range`` of ``0``) is not
held against the app for being refused; and an undeclared method sent to a path with a
control character in it (which the document's patterns exclude) is refused for the path, a
400 before the host looks at the method, rather than with a 405.
"""

from __future__ import annotations

import re
from typing import Any

from vault_app.openapi import SPEC
from vault_local.process import HostProcess

SEED = 21


DAMAGED_BY_OTHER_TESTS = re.compile(r"t-[0-9a-f]{12}")
"""The names conftest's ``stream`` fixture gives: tests that write straight to the shared storage,
some of which damage their stream on purpose (bit flips, a commit-record format from the future)."""


def _damaged_on_purpose(case: Any) -> bool:
    """Whether the request reads a stream of those tests: the app's 500 ``storage_error`` there
    (docs/API.md: a stream whose stored bytes fail their checks) is its right answer."""
    stream = (case.path_parameters or {}).get("stream")
    return isinstance(stream, str) and DAMAGED_BY_OTHER_TESTS.fullmatch(stream) is not None


def _error(response: Any) -> tuple[int, str, str]:
    try:
        doc = response.json()
        return response.status_code, str(doc.get("error")), str(doc.get("message"))
    except Exception:
        return response.status_code, "", ""


def expected(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """``filter_failure``: False for the named exceptions (see the module docstring)."""
    kind = type(failure).__name__
    status, code, message = _error(response)
    if kind == "UnsupportedMethodResponse" and status == 400 and "control character" in message:
        return False  # the path is refused before the method is looked at
    if status == 500 and code == "storage_error" and _damaged_on_purpose(case):
        return False  # a stream another test damaged in the shared storage, found by listing
    if kind != "RejectedPositiveData":
        return True  # every other check holds without exception
    if _has_negative_part(case):
        return False
    path, method = case.operation.path, case.operation.method.upper()
    query = case.query or {}
    if status == 400 and method == "GET" and path == "/streams/{stream}/messages":
        if "from" in query and "at" in query and message == "give either from or at, not both":
            return False
        if "at" in query and message.startswith("time ") and "out of range" not in message:
            return False  # matches the pattern, but no such date or time
    if status == 422 and code == "idempotency_mismatch":
        return False
    if status == 416 or (status == 400 and code == "invalid_offset"):
        return False  # past the committed end, or not a record boundary
    if status == 400 and method == "POST" and "is not valid base64" in message:
        return False
    return not (status == 413 and method == "POST" and code == "too_large")


def _has_negative_part(case: Any) -> bool:
    """Whether the tool generated some part of ``case`` to violate the document, though it
    calls the case positive (its coverage phase does so for ``Range: 0``)."""
    meta = case.meta
    return meta is not None and any(c.mode.is_negative for c in meta.components.values())


def run(host: HostProcess, config: dict[str, Any]) -> list[str]:
    """Every failed check of a run against ``host``, one line each."""
    # Imported here, not at collection: every xdist worker collects this module, one runs it.
    import schemathesis
    from schemathesis.engine import events
    from schemathesis.engine import from_schema as engine_for

    schema = schemathesis.openapi.from_dict(
        SPEC,
        config=schemathesis.Config.from_dict(
            {
                "base-url": host.url,
                "headers": {"x-functions-key": host.key},
                "seed": SEED,
                **config,
            }
        ),
    )
    schema.hook("filter_failure")(expected)
    failures: list[str] = []
    for event in engine_for(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            failures += _failed(event.recorder)
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            failures.append(f"error: {event!r}")
    return failures


def _failed(recorder: Any) -> list[str]:
    from schemathesis.engine import Status

    found = []
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.status != Status.FAILURE:
                continue
            interaction = recorder.interactions.get(case_id)
            what = ""
            if interaction is not None and interaction.response is not None:
                req, resp = interaction.request, interaction.response
                what = (
                    f"{req.method} {req.uri} headers={dict(req.headers)} body={(req.body or b'')[:200]!r} "
                    f"-> {resp.status_code} {(resp.content or b'')[:200]!r}"
                )
            title = check.failure_info.failure.title if check.failure_info else ""
            found.append(f"{recorder.label}: {check.name}: {title}: {what}")
    return found


RUN = {
    "generation": {"deterministic": True, "with-security-parameters": False},
    "phases": {
        # The document has no examples of its own: nothing to run.
        "examples": {"enabled": False},
        # Every constraint's edges, from the side the app must refuse: cheap 4xx answers.
        "coverage": {"generation": {"mode": "negative"}, "unexpected-methods": ["delete"]},
        # Valid requests, two per operation: each reaches storage (a POST is committed).
        "fuzzing": {"generation": {"mode": "positive", "max-examples": 2}},
        # Short sequences that use earlier answers (a POST's batch id in a status lookup), three.
        "stateful": {"max-steps": 5, "generation": {"max-examples": 3}},
    },
}
"""About 6 CPU-seconds (the host, its worker and Azurite less than half of it) and 6 s."""


def test_the_app_keeps_every_rule_of_its_openapi_document(vault_host: HostProcess) -> None:
    failures = run(vault_host, RUN)
    assert not failures, "\n".join(failures)
