"""The dashboard in a real browser: Debian's chromium driven by Playwright, on a super-cluster of real
``pubmesh serve`` processes (east of two nodes, west of one).

The page must show every node up, rates that move under traffic, a node killed with SIGKILL as down
within seconds, a stream's length as XLEN gives it; with no console error, and no request leaving
127.0.0.1 (every request the page makes goes through a route that checks its host).

Without chromium or Playwright these tests are skipped, saying so; with PUBMESH_REQUIRE_BROWSER=1
(as CI sets it) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from deploy.screenshot import CHROMIUM, Traffic, launch, redis_command
from node.run.local import REDIS_OFFSET
from pubmesh_testing.processes import LocalDeployment, local_deployment

_reason = None
if not os.access(CHROMIUM, os.X_OK):
    _reason = f"{CHROMIUM} not installed (apt-get install chromium): browser tests skipped"
elif importlib.util.find_spec("playwright") is None:
    _reason = "playwright not installed (pip install -e '.[dev]'): browser tests skipped"
if _reason is not None:
    if os.environ.get("PUBMESH_REQUIRE_BROWSER") == "1":
        raise RuntimeError(_reason.replace("skipped", "and PUBMESH_REQUIRE_BROWSER=1"))
    pytest.skip(_reason, allow_module_level=True)

from playwright.sync_api import Page, Route, sync_playwright  # noqa: E402 (only with a browser)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WAIT = 15.0
DOWN_WITHIN = 8.0
"""Seconds after SIGKILL by which the page must show the node down."""
UNKNOWN = "\N{EN DASH}"
"""What the page shows for a figure it does not have."""


@pytest.fixture(scope="module")
def deployment() -> Iterator[LocalDeployment]:
    with local_deployment("east:2,west:1") as deployment:
        yield deployment


def until(what: str, check: Callable[[], bool], wait: float = WAIT) -> float:
    """Poll ``check`` until it holds; the seconds that took."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < wait, f"not within {wait} s: {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def metric(page: Page, scope: str, name: str) -> str:
    """The text of a pinned metric inside the element ``scope`` selects ("" while there is none)."""
    found = page.locator(f'{scope} [data-metric="{name}"]')
    return found.first.inner_text() if found.count() else ""


def value(page: Page, scope: str, name: str) -> float | None:
    """A pinned metric as a number; None while unknown (a dash) or absent."""
    try:
        return float(metric(page, scope, name))
    except ValueError:
        return None


def state(page: Page, selector: str) -> str | None:
    found = page.locator(selector)
    return found.first.get_attribute("data-state") if found.count() else None


class Browser:
    """One page of the dashboard, with every console error and every request's host recorded."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.urls: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.route("**/*", self._check)

    def _check(self, route: Route) -> None:
        self.urls.append(route.request.url)
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            route.abort()


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


def test_the_dashboard_shows_the_supercluster_live(deployment: LocalDeployment, browser: Any) -> None:
    seen = Browser(browser.new_page())
    page = seen.page
    page.goto(deployment.monitoring_url("east1") + "/dashboard")

    until("three nodes up", lambda: page.locator('[data-node][data-state="up"]').count() == 3)
    names = page.locator("[data-node]").evaluate_all("els => els.map(e => e.dataset.node)")
    assert sorted(names) == ["east1", "east2", "west1"]
    links = ["east1->east2", "east2->east1", "east1->west1", "east2->west1"]
    until("links up", lambda: all(state(page, f'[data-link="{link}"]') == "up" for link in links))
    until("west1 to east up", lambda: page.locator('[data-link^="west1->east"]').count() >= 1)
    keys = ("msgs_in_rate", "msgs_out_rate", "connections", "subscriptions")
    scopes = [f'[data-node="{name}"]' for name in ("east1", "east2", "west1")]
    until("every metric", lambda: all(value(page, s, key) is not None for s in scopes for key in keys))
    assert value(page, '[data-node="east1"]', "msgs_in_rate") == 0.0  # (no traffic yet)

    # rates move under traffic: published on east1, delivered on west1 across the gateway
    east1, west1 = deployment.nodes["east1"], deployment.nodes["west1"]
    traffic = Traffic(east1.client_port, west1.client_port, "t.x", 100)
    try:
        until("east1 msgs in", lambda: (value(page, '[data-node="east1"]', "msgs_in_rate") or 0) > 0)
        until("west1 msgs out", lambda: (value(page, '[data-node="west1"]', "msgs_out_rate") or 0) > 0)
        gateway = '[data-link="east1->west1"]'
        until("gateway traffic", lambda: (value(page, gateway, "msgs_out_rate") or 0) > 0)
        assert value(page, '[data-node="east1"]', "connections") == 1
    finally:
        traffic.stop()
    assert traffic.received > 0

    # a stream's length is XLEN's, its groups and pending as XINFO counts them
    redis = west1.client_port + REDIS_OFFSET
    for i in range(7):
        redis_command(redis, "XADD", "orders", "*", "n", str(i))
    redis_command(redis, "XGROUP", "CREATE", "orders", "billing", "0")
    redis_command(redis, "XREADGROUP", "GROUP", "billing", "c1", "COUNT", "2", "STREAMS", "orders", ">")

    def xlen() -> float:
        reply = redis_command(redis, "XLEN", "orders")
        assert reply.startswith(b":")
        return float(reply[1:-2])

    assert xlen() == 7
    stream = '[data-stream="orders"]'
    until("stream length", lambda: value(page, stream, "length") == xlen())
    until("group", lambda: (value(page, stream, "groups"), value(page, stream, "pending")) == (1, 2))
    redis_command(redis, "XADD", "orders", "*", "n", "last")
    until("length follows", lambda: value(page, stream, "length") == xlen() == 8)

    # a node killed outright is shown down within seconds, greyed, with since when; no invented figures
    deployment.kill("east2")
    east2 = page.locator('[data-node="east2"]')
    took = until("east2 down", lambda: east2.get_attribute("data-state") == "down", DOWN_WITHIN)
    assert "down since" in east2.inner_text()
    assert metric(page, '[data-node="east2"]', "msgs_in_rate") == UNKNOWN
    assert metric(page, '[data-node="east2"]', "connections") == UNKNOWN
    until("route down", lambda: state(page, '[data-link="east1->east2"]') == "down")
    assert page.locator('[data-node][data-state="up"]').count() == 2
    assert took < DOWN_WITHIN

    assert seen.errors == []
    assert {urlsplit(url).hostname for url in seen.urls} == {"127.0.0.1"}
    paths = {urlsplit(url).path for url in seen.urls}
    assert paths >= {"/dashboard", "/dashboard/app.js", "/dashboard/app.css", "/dashboard/events"}
