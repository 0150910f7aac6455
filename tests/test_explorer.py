"""The web explorer in a real browser: headless Chromium (Debian's ``chromium-headless-shell``,
else its ``chromium``) driven by Playwright, against the local host on the session's Azurite,
asserting on what a person sees.

A limited reader (a token with ``Vault.Read.ui-ok-*``) sees its streams and a 403 page for the
others; the admin key sees the staging queues. A test that fails saves a screenshot in its tmp_path.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from conftest import key_header

from vault_core.checkpoints import CheckpointStore
from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess, explorer_url

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser")
CHROMIUM = next(filter(None, map(shutil.which, BROWSERS)), None)
"""The headless shell first: the same engine, without the full browser's headless mode, which
costs Chromium twice the CPU on these tests (16.6 CPU-s against 8.7)."""
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="playwright is not installed (pip install -e '.[dev]')",
    ),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium: ./dev test installs Debian's chromium as root (apt-get install chromium)",
    ),
]
TIMEOUT_MS = 20_000


def expect(target: Any) -> Any:
    """Playwright's ``expect``, imported when a test runs: every xdist worker collects this
    module, and only the one that runs it needs Playwright."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module; it and Playwright's driver are gone when the module ends,
    failed or not."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        pid = chromium_pids()
        try:
            yield chromium
        finally:
            chromium.close()
    assert not [p for p in pid if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], (
        "chromium left running"
    )


def chromium_pids() -> list[psutil.Process]:
    me = psutil.Process()
    return [c for c in me.children(recursive=True) if "chrom" in c.name().lower()]


@pytest.fixture(scope="module")
def context(browser: Any) -> Iterator[Any]:
    """One browser context for the module: a context costs Chromium more to make than a page.
    The tests stay apart all the same: the explorer keeps its credential in sessionStorage, which
    is each page's (tab's) own, and stores nothing else."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    yield context
    context.close()


@pytest.fixture
def page(context: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page (its own sessionStorage); a script error on the page fails the test, and a
    failed test keeps a screenshot of the end state in tmp_path (only then: a full page's
    rendering and PNG cost Chromium more CPU than most of these tests' pages)."""
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    failed_before = request.session.testsfailed  # the test's own report is counted before teardown
    try:
        yield tab
        assert not errors, errors
    finally:
        try:
            if errors or request.session.testsfailed > failed_before:
                tab.screenshot(path=str(tmp_path / f"{request.node.name[:60]}.png"), full_page=True)
        finally:
            tab.close()


@pytest.fixture(scope="module")
def http(vault_host: HostProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vault_host.url, timeout=60, headers=key_header(vault_host)) as client:
        yield client


@pytest.fixture(scope="module")
def reader(dev_issuer: DevIssuer) -> str:
    """A limited reader: read on ui-ok-* only."""
    return dev_issuer.mint("ui-reader", roles=["Vault.Read.ui-ok-*"])


def post(http: httpx.Client, stream: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    r = http.post(f"/streams/{stream}/messages", params={"wait": 20}, json={"messages": messages})
    assert r.status_code == 200, r.text
    return r.json()


def texts(*values: str) -> list[dict[str, str]]:
    return [{"value": v} for v in values]


def open_as(
    page: Any, host: HostProcess, route: str, *, token: str | None = None, key: str | None = None
) -> None:
    """Open the explorer with a credential in the fragment (the demo's link), then a route."""
    page.goto(explorer_url(host.url, key=key, token=token))
    page.wait_for_function("location.hash === '#/'")
    if route:
        page.evaluate("route => { location.hash = route }", route)


def uid() -> str:
    return uuid.uuid4().hex[:10]


# -- the streams page --------------------------------------------------------------------------
def test_a_reader_sees_its_streams_with_their_ingest_rate_and_nothing_else(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    mine, other = f"ui-ok-{uid()}", f"ui-secret-{uid()}"
    post(http, mine, texts("a", "b", "c"))
    post(http, other, texts("hidden"))
    open_as(page, vault_host, "", token=reader)
    assert reader not in page.url  # the credential left the address bar at once
    row = page.locator(f'tr[data-stream="{mine}"]')
    expect(row).to_be_visible()
    expect(row.locator("td").nth(2)).to_have_text("3")
    expect(row.locator(".hour-total")).to_have_text("3 in the last hour")
    assert row.locator("svg.chart").count() == 2  # messages/s and bytes/s
    assert page.locator(f'tr[data-stream="{other}"]').count() == 0
    assert page.locator("#queues").count() == 0  # staging queues are for admins
    expect(page.locator("#who")).to_contain_text("token ui-reader")


def test_columns_sort_and_admins_see_the_staging_queues(
    page: Any, http: httpx.Client, vault_host: HostProcess
) -> None:
    stamp = uid()
    for name, n in ((f"ui-ok-a{stamp}", 1), (f"ui-ok-b{stamp}", 4)):
        post(http, name, texts(*"x" * n))
    open_as(page, vault_host, "", key=vault_host.key)
    expect(page.locator("#queues")).to_be_visible()
    expect(page.locator(f'tr[data-stream="ui-ok-b{stamp}"]')).to_be_visible()
    page.get_by_role("columnheader", name="Messages").click()  # largest first
    page.get_by_role("columnheader", name="Messages").click()  # then smallest first
    order = page.locator("#streams tbody tr").evaluate_all("rows => rows.map(r => r.dataset.stream)")
    ours = [s for s in order if s.endswith(stamp)]
    assert ours == [f"ui-ok-a{stamp}", f"ui-ok-b{stamp}"]
    assert page.get_by_role("columnheader", name="Messages").get_attribute("aria-sort") == "ascending"


# -- the stream page ---------------------------------------------------------------------------
def test_a_link_to_an_offset_shows_that_message_as_text_json_or_hex(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    stream = f"ui-ok-{uid()}"
    post(http, stream, texts("before"))
    markup = '<img src=x onerror="document.title=1"><b>bold</b>'
    done = post(
        http,
        stream,
        [
            {"key": "order-7", "value": '{"total": 42, "items": [1, 2]}'},
            {"value": markup},
            {"value": base64.b64encode(b"\x00\x01\xfe\xffABC").decode(), "encoding": "base64"},
        ],
    )
    open_as(page, vault_host, f"#/streams/{stream}?from={done['first_offset']}", token=reader)
    target = page.locator("article.msg.target")
    expect(target).to_have_count(1)
    expect(target.locator(".offset")).to_have_text(f"offset {done['first_offset']}")
    expect(target.locator(".key")).to_have_text("key order-7")
    assert target.locator("pre.value").inner_text() == json.dumps({"total": 42, "items": [1, 2]}, indent=2)
    messages = page.locator("article.msg")
    expect(messages).to_have_count(3)  # from that offset on: not the message before it
    # Markup in a message is text on the page: no element made of it, nothing run.
    assert messages.nth(1).locator("pre.value").inner_text() == markup
    assert page.locator(".messages img, .messages b").count() == 0 and page.title() != "1"
    binary = messages.nth(2).locator("pre.value")
    assert binary.inner_text().startswith("00000000  00 01 fe ff 41 42 43")
    messages.nth(2).get_by_role("button", name="show base64").click()
    expect(binary).to_have_text(base64.b64encode(b"\x00\x01\xfe\xffABC").decode())
    link = target.get_by_role("link", name="link", exact=True).get_attribute("href")
    assert link.endswith(f"#/streams/{stream}?from={done['first_offset']}")


def test_paging_forward_and_back_and_seeking_by_time(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    stream = f"ui-ok-{uid()}"
    post(http, stream, texts("m0", "m1", "m2"))
    time.sleep(0.05)
    later = post(http, stream, texts("m3", "m4"))
    open_as(page, vault_host, f"#/streams/{stream}?from=0&limit=2", token=reader)
    values = page.locator("article.msg pre.value")
    expect(values).to_have_text(["m0", "m1"])
    page.get_by_role("button", name="Next ▶").click()
    expect(values).to_have_text(["m2", "m3"])
    page.get_by_role("button", name="Next ▶").click()
    expect(values).to_have_text(["m4"])
    expect(page.get_by_role("button", name="Next ▶")).to_be_disabled()
    page.get_by_role("button", name="◀ Previous").click()
    expect(values).to_have_text(["m2", "m3"])
    page.get_by_label("Time", exact=True).fill(str(later["timestamp"]))
    page.get_by_role("button", name="Seek").click()
    expect(values).to_have_text(["m3", "m4"])
    page.get_by_label("Offset", exact=True).fill("0")
    page.get_by_role("button", name="Go").click()
    expect(values).to_have_text(["m0", "m1"])


def test_the_live_tail_shows_a_message_posted_while_it_waits_and_pauses(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    stream = f"ui-ok-{uid()}"
    post(http, stream, texts("old"))
    open_as(page, vault_host, f"#/streams/{stream}", token=reader)
    expect(page.locator("article.msg pre.value")).to_have_text(["old"])
    page.get_by_role("button", name="Follow live").click()
    expect(page.locator(".status")).to_contain_text("following")
    post(http, stream, texts("new while tailing"))
    expect(page.locator("article.msg.fresh pre.value")).to_have_text(["new while tailing"])
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".status")).to_contain_text("paused")
    post(http, stream, texts("after the pause"))
    time.sleep(1.5)  # long enough for a tail that still ran to show it
    assert page.locator("article.msg pre.value").all_inner_texts() == ["old", "new while tailing"]


def test_a_range_downloads_as_ndjson(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str, tmp_path: Path
) -> None:
    stream = f"ui-ok-{uid()}"
    post(http, stream, texts("d0", "d1", "d2", "d3"))
    open_as(page, vault_host, f"#/streams/{stream}", token=reader)
    expect(page.locator("article.msg")).to_have_count(4)
    page.get_by_label("messages", exact=True).fill("3")
    with page.expect_download() as info:
        page.get_by_role("button", name="Download NDJSON").click()
    saved = tmp_path / info.value.suggested_filename
    info.value.save_as(saved)
    assert saved.name == f"{stream}-0.ndjson"
    assert [json.loads(line)["value"] for line in saved.read_text().splitlines()] == ["d0", "d1", "d2"]


def test_a_stream_the_reader_may_not_read_is_a_clear_403_page(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    secret = f"ui-secret-{uid()}"
    post(http, secret, texts("classified"))
    open_as(page, vault_host, f"#/streams/{secret}", token=reader)
    denied = page.locator(".panel.denied")
    expect(denied.locator("h2")).to_have_text("Access denied (403)")
    expect(denied).to_contain_text(f'may not read stream "{secret}"')
    assert "classified" not in page.content()
    page.evaluate("route => { location.hash = route }", f"#/streams/{secret}/groups")
    expect(page.locator(".panel.denied h2")).to_have_text("Access denied (403)")


def test_without_a_credential_the_page_asks_for_one(page: Any, vault_host: HostProcess) -> None:
    page.goto(f"{vault_host.url}/ui/")
    expect(page.locator(".panel.denied h2")).to_have_text("Sign in needed")
    page.get_by_role("link", name="give a function key or a token").click()
    page.get_by_label("Value").fill(vault_host.key)
    page.get_by_role("button", name="Use it").click()
    expect(page.locator("#streams")).to_be_visible()
    expect(page.locator("#who")).to_contain_text("key local")


# -- consumer groups and batches ---------------------------------------------------------------
def test_groups_show_position_and_lag_with_a_chart(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    stream = f"ui-ok-{uid()}"
    first = post(http, stream, texts("g0", "g1"))
    post(http, stream, texts("g2"))
    group = f"billing-{uid()}"
    store = CheckpointStore.from_connection_string(vault_host.connection_string).ensure()
    store.save(
        group, stream, first["next_offset"], etag=None, now_ms=int(time.time() * 1000), member="worker-1"
    )
    open_as(page, vault_host, f"#/streams/{stream}/groups", token=reader)
    row = page.locator(f'#groups tr[data-group="{group}"]')
    expect(row).to_be_visible()
    cells = row.locator("td")
    lag = http.get(f"/streams/{stream}").json()["committed"] - first["next_offset"]
    expect(cells.nth(1)).to_have_text(f"{first['next_offset']:,}")
    expect(cells.nth(2)).to_have_text(f"{lag} B")
    expect(cells.nth(5)).to_have_text("worker-1")
    expect(page.locator("svg.chart-bars text").first).to_have_text(group)
    page.get_by_role("link", name="Consumer groups").first.click()  # every stream's groups
    expect(page.locator(f'#groups tr[data-group="{group}"]')).to_be_visible()


def test_a_batch_id_shows_its_status_and_offsets(
    page: Any, http: httpx.Client, vault_host: HostProcess, reader: str
) -> None:
    stream = f"ui-ok-{uid()}"
    done = post(http, stream, texts("b0", "b1"))
    open_as(page, vault_host, "#/batches", token=reader)
    page.get_by_label("Batch id").fill(done["batch_id"])
    page.get_by_role("button", name="Look up").click()
    panel = page.locator("#batch .panel")
    expect(panel.locator(".badge")).to_have_text("committed")
    panel.get_by_role("link", name=str(done["first_offset"]), exact=True).click()
    expect(page.locator("article.msg.target pre.value")).to_have_text("b0")
    page.evaluate("route => { location.hash = route }", "#/batches?id=no-such-batch")
    expect(page.locator("#batch h2")).to_have_text("Not found")
