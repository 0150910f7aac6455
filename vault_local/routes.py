"""The app's route table: every function and its trigger, read from the ``FunctionApp`` object.

The Functions host indexes a Python app the same way (the worker reports each function's
bindings); both the local host and its language workers use :func:`discover`, so they agree
on names, routes and queues.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import azure.functions as func


@dataclass(frozen=True)
class HttpFunction:
    name: str
    route: str
    pattern: re.Pattern[str]
    methods: frozenset[str]
    auth_level: str
    arg_name: str
    fn: Callable[..., Any]


@dataclass(frozen=True)
class QueueFunction:
    name: str
    queue_name: str
    connection: str
    arg_name: str
    fn: Callable[..., Any]


def _route_pattern(route: str) -> re.Pattern[str]:
    """Route templates as the Functions host reads them: ``{name}`` (or ``{name:constraint}``)
    matches one path segment; a last ``{*name}`` matches the rest of the path, slashes included,
    and may be absent (ASP.NET's catch-all: ``ui/{*path}`` answers ``ui``, ``ui/`` and ``ui/a/b``)."""
    regex = re.sub(r"/\{\*(\w+)\}$", r"(?:/(?P<\1>.*))?", route.strip("/"))
    regex = re.sub(r"\{(\w+)(?::[^}]*)?\}", r"(?P<\1>[^/]+)", regex)
    return re.compile(rf"\A{regex}\Z")  # \Z: unlike $, no line end may follow


def discover(app: func.FunctionApp) -> tuple[list[HttpFunction], list[QueueFunction]]:
    """Read every function's trigger from the app object (the app is the route table)."""
    http: list[HttpFunction] = []
    queues: list[QueueFunction] = []
    for f in app.get_functions():
        name = str(f.get_function_name())
        found = f.get_trigger()
        if found is None:
            raise ValueError(f"function {name} has no trigger")
        trigger: dict[str, Any] = found.get_dict_repr()
        kind = trigger["type"]
        if kind == "httpTrigger":
            route = str(trigger.get("route") or name)
            methods = frozenset(
                str(getattr(m, "value", m)).upper()
                for m in trigger.get("methods")
                or ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
            )
            auth = str(getattr(trigger.get("authLevel"), "value", trigger.get("authLevel") or "function"))
            http.append(
                HttpFunction(
                    name,
                    route,
                    _route_pattern(route),
                    methods,
                    auth.lower(),
                    trigger["name"],
                    f.get_user_function(),
                )
            )
        elif kind == "queueTrigger":
            queues.append(
                QueueFunction(
                    name,
                    trigger["queueName"],
                    trigger["connection"],
                    trigger["name"],
                    f.get_user_function(),
                )
            )
        else:
            raise ValueError(f"the local host does not run {kind} triggers ({name})")
    # Literal routes before templated ones, longer before shorter, like the host's route ordering.
    http.sort(key=lambda h: (h.route.count("{"), -len(h.route)))
    return http, queues
