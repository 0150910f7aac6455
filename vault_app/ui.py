"""The web explorer's static files, served by the Function App at ``/api/ui/`` (docs/API.md).

The files carry no data: the page's script calls the API with the credential the user gives
it, so they are served to anyone, and nothing about the request (not even a credential) is
looked at, as for ``/openapi.json``. Only the files shipped in ``vault_app/explorer/`` exist,
read once at import: a path is a key into that table, never joined onto a directory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from vault_app.http import HttpError, Request, Response, guarded
from vault_app.runtime import Runtime

ASSETS = Path(__file__).with_name("explorer")
TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Scripts and styles from these files only (no inline script, no eval), requests to this
origin only: even a message that got rendered as markup could neither run nor send anything."""
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",  # revalidate (cheap, by ETag): a deploy shows at once
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    mimetype: str
    etag: str


def _load(folder: Path) -> dict[str, Asset]:
    found = {}
    for path in sorted(folder.iterdir()):
        mimetype = TYPES.get(path.suffix)
        if path.is_file() and mimetype:
            body = path.read_bytes()
            found[path.name] = Asset(body, mimetype, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return found


FILES = _load(ASSETS)


@guarded
def serve(rt: Runtime, req: Request) -> Response:
    name = req.route.get("path") or "index.html"
    asset = FILES.get(name)
    if asset is None:
        raise HttpError(404, "not_found", f"the explorer has no file {name[:100]!r}")
    headers = {**SECURITY_HEADERS, "ETag": asset.etag}
    if req.header("if-none-match") == asset.etag:
        return Response(304, b"", headers, mimetype=asset.mimetype)
    return Response(200, asset.body, headers, mimetype=asset.mimetype)
