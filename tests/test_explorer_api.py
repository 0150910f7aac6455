"""The explorer's routes over real HTTP: its static files and the read routes it draws from
(ingest rates, consumer groups), against the local host on the session's Azurite."""

from __future__ import annotations

import fnmatch
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import key_header

from vault_app import explorer_api, ui
from vault_core import limits
from vault_core.checkpoints import CheckpointStore
from vault_local.process import HostProcess

EXPLORER = Path(ui.__file__).with_name("explorer")


@pytest.fixture(scope="module")
def http(vault_host: HostProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vault_host.url, timeout=60, headers=key_header(vault_host)) as client:
        yield client


def post(http: httpx.Client, stream: str, *values: str) -> dict[str, int]:
    r = http.post(
        f"/streams/{stream}/messages", params={"wait": 20}, json={"messages": [{"value": v} for v in values]}
    )
    assert r.status_code == 200, r.text
    return r.json()


# -- rates -------------------------------------------------------------------------------------
def test_rates_count_the_messages_of_the_last_hour(http: httpx.Client, stream: str) -> None:
    post(http, stream, "a", "b", "c")
    post(http, stream, "d")
    r = http.get(f"/streams/{stream}/rates")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["minutes"] == 60 and len(doc["rates"]) == 60
    assert sum(m["messages"] for m in doc["rates"]) == 4 == doc["count"]
    assert sum(m["bytes"] for m in doc["rates"]) == doc["committed"]
    assert doc["rates"][0]["time"] == doc["from"] and doc["from"] % 60_000 == 0
    assert 0 < doc["rates"][-1]["seconds"] <= 60 and doc["rates"][0]["seconds"] == 60
    assert len(http.get(f"/streams/{stream}/rates", params={"minutes": 5}).json()["rates"]) == 5


@pytest.mark.parametrize("minutes", ["0", "1441", "soon"])
def test_rates_refuse_a_bad_window(http: httpx.Client, stream: str, minutes: str) -> None:
    r = http.get(f"/streams/{stream}/rates", params={"minutes": minutes})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"


def test_rates_and_groups_of_a_stream_that_does_not_exist_are_404(http: httpx.Client, stream: str) -> None:
    for route in ("rates", "groups"):
        r = http.get(f"/streams/{stream}/{route}")
        assert r.status_code == 404 and r.json()["error"] == "not_found", r.text


# -- consumer groups ---------------------------------------------------------------------------
def test_groups_show_each_position_and_its_lag_in_bytes_and_time(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    first = post(http, stream, "one", "two")
    time.sleep(0.05)  # a later commit has a later timestamp
    second = post(http, stream, "three")
    store = CheckpointStore.from_connection_string(vault_host.connection_string).ensure()
    billing, audit, done = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("billing", "audit", "done"))
    store.save(billing, stream, first["next_offset"], etag=None, now_ms=1_800_000_000_000, member="m-1")
    store.save(audit, stream, 2, etag=None, now_ms=1)  # not a message offset (in format 1 or 2): no time lag
    store.save(done, stream, second["next_offset"], etag=None, now_ms=2)
    r = http.get(f"/streams/{stream}/groups")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["committed"] == second["next_offset"] and doc["truncated"] is False
    groups = {g["group"]: g for g in doc["groups"]}
    assert list(groups) == sorted([billing, audit, done])
    assert groups[billing] == {
        "group": billing,
        "offset": first["next_offset"],
        "member": "m-1",
        "updated": 1_800_000_000_000,
        "lag_bytes": second["next_offset"] - first["next_offset"],
        "first_unread_timestamp": second["timestamp"],
        "lag_ms": 0,  # the first unread message is the last one
    }
    assert groups[audit]["lag_bytes"] == second["next_offset"] - 2 and groups[audit]["lag_ms"] is None
    assert groups[done]["lag_bytes"] == 0 and groups[done]["lag_ms"] == 0
    # Read from the start: the lag is the age of the oldest unread message against the newest.
    store.save(billing, stream, 0, etag=store.get(billing, stream).etag, now_ms=3)  # type: ignore[union-attr]
    lagging = {g["group"]: g for g in http.get(f"/streams/{stream}/groups").json()["groups"]}[billing]
    assert lagging["lag_ms"] == second["timestamp"] - first["timestamp"] > 0


def test_a_stream_without_groups_lists_none(http: httpx.Client, stream: str) -> None:
    post(http, stream, "x")
    assert http.get(f"/streams/{stream}/groups").json()["groups"] == []


# -- the static files --------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/ui", "/ui/", "/ui/index.html"])
def test_the_page_is_served_to_anyone_with_strict_headers(vault_host: HostProcess, path: str) -> None:
    # No credential, and a bad one: the files carry no data, so nothing about the caller is checked.
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        r = httpx.get(vault_host.url + path, headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/html")
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
        assert "<script" in r.text and "<script>" not in r.text  # the page's one script is a file


def test_assets_have_their_types_and_revalidate_by_etag(vault_host: HostProcess) -> None:
    for name, kind in (
        ("app.js", "text/javascript"),
        ("style.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ):
        r = httpx.get(f"{vault_host.url}/ui/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), name
        again = httpx.get(f"{vault_host.url}/ui/{name}", headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize(
    "path", ["/ui/nope.js", "/ui/%2e%2e/function_app.py", "/ui/..%2f..%2fhost.json", "/ui/explorer/app.js"]
)
def test_only_the_shipped_files_exist(vault_host: HostProcess, path: str) -> None:
    r = httpx.get(vault_host.url + path)
    assert r.status_code == 404 and r.json()["error"] == "not_found"


# -- the files themselves ----------------------------------------------------------------------
SCRIPTS = sorted(EXPLORER.glob("*.js"))


def test_every_file_the_page_loads_is_shipped() -> None:
    html = (EXPLORER / "index.html").read_text(encoding="utf-8")
    referenced = re.findall(r'(?:src|href)="/api/ui/([^"]+)"', html)
    imported = [name for js in SCRIPTS for name in re.findall(r'from "\./([^"]+)"', js.read_text())]
    assert referenced and imported
    assert set(referenced) | set(imported) <= set(ui.FILES)
    assert {p.name for p in EXPLORER.iterdir()} == set(ui.FILES)  # nothing shipped that is not served


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_script_turns_strings_into_markup_or_code(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in text, f"{script.name} uses {sink}: build elements and text nodes (dom.js)"


def test_the_api_document_says_what_the_code_does() -> None:
    api_md = " ".join((Path(ui.__file__).parents[1] / "docs" / "API.md").read_text(encoding="utf-8").split())
    assert ui.CONTENT_SECURITY_POLICY in api_md
    assert f"At most {limits.MAX_GROUPS} groups" in api_md
    assert f"(1-{explorer_api.MAX_RATE_MINUTES}, default 60)" in api_md


def test_the_files_deploy_with_the_app() -> None:
    """`azd deploy` zips the project without what .funcignore lists: the explorer must stay in."""
    root = Path(ui.__file__).parents[1]
    patterns = [p for p in (root / ".funcignore").read_text().splitlines() if p and not p.startswith("#")]
    for name in ui.FILES:
        parts = ("vault_app", "explorer", name)
        assert not [p for p in patterns for part in parts if fnmatch.fnmatch(part, p)], name
