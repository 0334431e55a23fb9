"""The web dashboard in a real browser: Debian's chromium driven by playwright opens the job page
of a running Ray job whose sink is slow, sees every JobGraph vertex, the back-pressured one
coloured HIGH and the slow one busy, counters that move, and cancels the job with its button.

Both pages are opened from the address the server logs (the token in its fragment, never sent
to a server); the page strips it from the address bar, sends it as a header, and no cookie is
ever set.

playwright never downloads a browser here: it launches the ``chromium`` that
``scripts/setup.sh`` installs from Debian. Without one the tests are skipped, saying so -- except
in CI (``CI=true``), where a missing chromium fails them. A screenshot of the job page is saved
to ``tests/artifacts/dashboard-job.png``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from raylink.api.functions import SinkFunction
from raylink.tests.runtime_jobs import CountingSource, make_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("RAYLINK_TEST_ARTIFACTS", Path(__file__).resolve().parent / "artifacts"))

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")

pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None and not IN_CI,
        reason="no chromium on this machine (scripts/setup.sh installs Debian's chromium)",
    ),
    pytest.mark.slow,
]


def _chromium() -> str:
    """The chromium to drive; in CI a missing one is a failure, not a skip."""
    assert CHROMIUM is not None, "CI=true but no chromium: scripts/setup.sh installs Debian's chromium (dev extra)"
    return CHROMIUM


def _playwright() -> Any:
    if IN_CI:  # the dev extra is installed in CI: its absence is a failure
        import playwright.sync_api

        return playwright.sync_api
    return pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")


def _no_cookies(page: Any) -> None:
    assert page.context.cookies() == [], page.context.cookies()
    assert page.evaluate("document.cookie") == ""


def _logged_address(records: list[logging.LogRecord]) -> str:
    """The dashboard address the server logged at start (as a user copies it from the terminal)."""
    for record in records:
        found = re.search(r"web dashboard .*? at (\S+)", record.getMessage())
        if found:
            return found.group(1)
    raise AssertionError(f"no dashboard address logged: {[r.getMessage() for r in records]}")


class SlowSink(SinkFunction):
    """Takes 5 ms per record: everything upstream of it is back pressured."""

    def invoke(self, value: Any, context: Any = None) -> None:
        time.sleep(0.005)


def _vertex(name: str) -> str:
    return f'svg.dag g.vertex[data-name="{name}"]'


def _attribute(page: Any, name: str, attribute: str) -> int:
    return int(page.get_attribute(_vertex(name), attribute))


@pytest.mark.timeout(300)
def test_dashboard_shows_back_pressure_and_cancels_the_job(ray_session, caplog):
    sync_api = _playwright()
    logger = logging.getLogger("raylink.rest")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(caplog.handler)  # whatever the raylink logger's propagation
    env = make_env("ray", 1)
    (
        env.add_source(CountingSource(), "Counting")
        .rebalance()
        .map(lambda x: x + 1)
        .name("Upstream")
        .rebalance()
        .add_sink(SlowSink())
        .name("SlowSink")
    )
    client = env.execute_async("dashboard job")
    logger.removeHandler(caplog.handler)
    logger.setLevel(level)
    address = _logged_address(caplog.records)
    token = client.rest_endpoint.token
    assert address == f"{client.rest_endpoint.url}/#token={token}&next=/jobs/{client.job_id}"
    names = [ejv.name for ejv in client.execution_graph.job_vertices]
    assert names == ["Source: Counting", "Upstream", "Sink: SlowSink"]
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(60_000)
                expect = sync_api.expect
                sent = []  # every request the page makes: none carries the token in its URL
                page.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
                # the logged address opens the job page; the token leaves the address bar
                page.goto(address)
                page.wait_for_url(f"**/#/jobs/{client.job_id}")
                assert token not in page.url
                expect(page.locator("svg.dag g.vertex")).to_have_count(len(names), timeout=60_000)
                # the job list: name, state, start, duration, restarts; its name leads to the job page
                page.click("a.brand")
                row = page.locator(f'#jobs tr[data-jid="{client.job_id}"]')
                expect(row).to_contain_text("dashboard job")
                expect(row).to_contain_text("RUNNING")
                expect(row.locator("td.restarts")).to_have_text("0")
                row.get_by_role("link", name="dashboard job").click()
                page.wait_for_url(f"**/#/jobs/{client.job_id}")
                expect(page.locator("svg.dag g.vertex")).to_have_count(len(names), timeout=60_000)
                for name in names:  # every vertex, its name written in its box
                    expect(page.locator(_vertex(name)).locator("text.vname")).to_have_text(name)
                # the map before the slow sink waits for buffers: HIGH, in red; the sink is busy
                expect(page.locator(_vertex("Upstream"))).to_have_attribute("data-backpressure", "high", timeout=60_000)
                expect(page.locator(_vertex("Upstream")).locator("text.badge")).to_have_text("HIGH")
                page.wait_for_function(
                    'name => Number(document.querySelector(`svg.dag g.vertex[data-name="${name}"]`)'
                    ".dataset.busy) >= 50",
                    arg="Sink: SlowSink",
                )
                fill = page.eval_on_selector(_vertex("Upstream") + " rect.box", "rect => getComputedStyle(rect).stroke")
                assert fill == "rgb(245, 34, 45)", fill  # Flink's HIGH red
                # the counters move between two reads (the page redraws every second)
                first = _attribute(page, "Sink: SlowSink", "data-records-in")
                page.wait_for_function(
                    '([name, first]) => Number(document.querySelector(`svg.dag g.vertex[data-name="${name}"]`)'
                    ".dataset.recordsIn) > first",
                    arg=["Sink: SlowSink", first],
                )
                assert _attribute(page, "Sink: SlowSink", "data-records-in") > first
                expect(page.locator("#subtasks tbody tr")).to_have_count(1)
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                shot = ARTIFACTS / "dashboard-job.png"
                page.screenshot(path=str(shot), full_page=True)
                print(f"dashboard screenshot: {shot}")
                # a fresh tab without the token sees no job data
                bare = browser.new_page()
                bare.goto(f"{client.rest_endpoint.url}/")
                expect(bare.locator("#connection")).to_contain_text("401")
                assert bare.locator(f'#jobs tr[data-jid="{client.job_id}"]').count() == 0
                # the cancel button ends the job
                page.on("dialog", lambda dialog: dialog.accept())
                page.click("#cancel")
                assert client.wait(60), "the job did not end after the dashboard's cancel"
                _no_cookies(page)
                api_calls = [(url, auth) for url, auth in sent if "/jobs" in url]
                assert api_calls and all(auth == f"Bearer {token}" for _, auth in api_calls)
                assert not any(token in url for url, _ in sent)
            finally:
                browser.close()
        assert str(client.get_job_status()) == "CANCELED"
    finally:
        client.cancel()
        client.wait(60)


@pytest.fixture(scope="module")
def session(ray_session):
    from raylink.tests.runtime_jobs import running_session

    yield from running_session(executors=1)


@pytest.mark.timeout(300)
def test_session_dashboard_cancels_with_the_printed_address(session):
    """The session cluster's Dispatcher serves the same dashboard; its cancel button works from
    the address printed at start (the token in its fragment; no cookie)."""
    import json

    import ray

    from raylink.actors.dispatcher import dashboard_url
    from raylink.runtime.client.rest_cluster_client import RestJobClient
    from raylink.runtime.client.rest_endpoint import RestEndpoint, _endpoint_file
    from raylink.runtime.runtime_dir import read_private_file

    sync_api = _playwright()
    recorded = json.loads(read_private_file(_endpoint_file(ray.get_runtime_context().gcs_address)))
    endpoint = RestEndpoint(recorded["url"], recorded["token"])
    env = make_env("ray", 1)
    env.add_source(CountingSource(), "Counting").rebalance().add_sink(SlowSink()).name("SlowSink")
    client = RestJobClient.submit(endpoint, env, "session dashboard job")
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.set_default_timeout(60_000)
                page.goto(dashboard_url(endpoint.url, endpoint.token))
                assert "token" not in page.url  # the token left the address bar (kept in session storage)
                page.locator(f'#jobs tr[data-jid="{client.job_id}"] a').click()
                expect = sync_api.expect
                expect(page.locator("svg.dag g.vertex")).to_have_count(2)
                page.on("dialog", lambda dialog: dialog.accept())
                page.click("#cancel")
                expect(page.locator("section.job-head .state")).to_have_text("CANCELED")
                _no_cookies(page)
            finally:
                browser.close()
        with pytest.raises(Exception):
            client.get_job_execution_result(60)
        assert str(client.get_job_status()) == "CANCELED"
    finally:
        if str(client.get_job_status()) not in ("CANCELED", "FAILED", "FINISHED"):
            client.cancel()
