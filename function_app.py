"""Message Vault for Azure Functions: triggers and bindings only.

Each trigger converts the Functions types to the app's own and calls one handler in
``vault_app`` with the app's one :class:`~vault_app.runtime.Runtime`, built here once; all logic
(and every error mapping) lives there.

The HTTP functions are ``async def``: the Python worker runs them on its event loop, so a
request that waits (a long poll) holds a coroutine, not one of the worker's threads; the app
runs its blocking storage calls in a thread pool of its own (``vault_app.http.in_thread``).
The queue-triggered writer is a plain function, run in the worker's thread pool.

Every route is ANONYMOUS at the Functions level: the app checks every request itself
(``vault_app.auth``: Entra ID tokens, its own named keys, the access policy). A FUNCTION-level
route would make the Functions front end refuse bearer tokens, and its host keys open every
route alike, which per-stream permissions cannot work with. See docs/SECURITY.md.
"""

from __future__ import annotations

import atexit

import azure.functions as func

from vault_app import api, config, explorer_api, poison_api, ui
from vault_app.http import Request, Response, repeated_query_names
from vault_app.runtime import Runtime
from vault_app.writer_fn import StagingMessage, write_staged
from vault_core import retry

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)
settings = config.load_settings()
retry.set_request_budget(settings.request_budget_seconds)  # every HTTP request's storage budget
runtime = Runtime.from_settings(settings)
"""The app's long-lived objects, handed to every function; closed at exit (the local host's
workers close it earlier)."""
atexit.register(runtime.close)


def _request(req: func.HttpRequest) -> Request:
    return Request(
        method=req.method,
        route=dict(req.route_params),
        query=dict(req.params),
        headers={k.lower(): v for k, v in req.headers.items()},
        body=req.get_body() or b"",
        repeated=repeated_query_names(req.url),
    )


def _response(resp: Response) -> func.HttpResponse:
    return func.HttpResponse(
        body=resp.body, status_code=resp.status, headers=resp.headers, mimetype=resp.mimetype
    )


@app.route(route="streams/{stream}/messages", methods=["POST"])
async def post_messages(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.post_messages(runtime, _request(req)))


@app.route(route="streams/{stream}/messages", methods=["GET"])
async def get_messages(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.get_messages(runtime, _request(req)))


@app.route(route="streams/{stream}/log", methods=["GET"])
async def get_log(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.get_log(runtime, _request(req)))


@app.route(route="streams/{stream}/access", methods=["GET"])
async def get_access(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.get_access(runtime, _request(req)))


@app.route(route="streams/{stream}/rates", methods=["GET"])
async def get_rates(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await explorer_api.get_rates(runtime, _request(req)))


@app.route(route="streams/{stream}/groups", methods=["GET"])
async def get_groups(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await explorer_api.get_groups(runtime, _request(req)))


@app.route(route="streams/{stream}", methods=["GET"])
async def get_stream(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.get_stream(runtime, _request(req)))


@app.route(route="streams", methods=["GET"])
async def list_streams(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.list_streams(runtime, _request(req)))


@app.route(route="streams/{stream}/batches/{id}", methods=["GET"])
async def get_stream_batch(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.get_stream_batch(runtime, _request(req)))


@app.route(route="batches/{id}", methods=["GET"])
async def get_batch(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.get_batch(runtime, _request(req)))


@app.route(route="poison", methods=["GET"])
async def list_poison(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await poison_api.list_poison(runtime, _request(req)))


@app.route(route="poison/replay", methods=["POST"])
async def replay_poison(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await poison_api.replay_poison(runtime, _request(req)))


@app.route(route="health", methods=["GET"])
async def health(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.health(runtime, _request(req)))


@app.route(route="whoami", methods=["GET"])
async def whoami(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.whoami(runtime, _request(req)))


@app.route(route="openapi.json", methods=["GET"])
async def openapi(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await api.openapi(runtime, _request(req)))


@app.route(route="ui/{*path}", methods=["GET"])
async def explorer(req: func.HttpRequest) -> func.HttpResponse:
    return _response(await ui.serve(runtime, _request(req)))


def _register_writer(account: int, queue_name: str) -> None:
    """One writer function body, bound to every staging queue of every staging account."""

    @app.function_name(f"writer_{account}_{queue_name.replace('-', '_')}")
    @app.queue_trigger(arg_name="msg", queue_name=queue_name, connection=config.staging_connection(account))
    def writer(msg: func.QueueMessage) -> None:
        body = msg.get_body().decode("utf-8", errors="replace")
        message = StagingMessage(msg.id or "", body, msg.dequeue_count or 1, msg.pop_receipt)
        write_staged(runtime, runtime.services.queue(account, queue_name), message)


for _account in range(settings.staging_accounts):
    for _queue in settings.queue_names:
        _register_writer(_account, _queue)
