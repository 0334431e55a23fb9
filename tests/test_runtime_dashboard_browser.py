"""The web dashboard in a real browser: Debian's chromium driven by playwright opens the job page
of a running Ray job whose sink is slow, sees every JobGraph vertex, the back-pressured one
coloured HIGH and the slow one busy, counters that move, and cancels the job with its button.

playwright never downloads a browser here: it launches the ``chromium`` that
``scripts/setup.sh`` installs from Debian (the test is skipped, saying so, where there is none).
A screenshot of the job page is saved to ``tests/artifacts/dashboard-job.png``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from raylink.api.functions import SinkFunction
from raylink.tests.runtime_jobs import CountingSource, make_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("RAYLINK_TEST_ARTIFACTS", Path(__file__).resolve().parent / "artifacts"))

pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium on this machine (scripts/setup.sh installs Debian's chromium)"
    ),
    pytest.mark.slow,
]


class SlowSink(SinkFunction):
    """Takes 5 ms per record: everything upstream of it is back pressured."""

    def invoke(self, value: Any, context: Any = None) -> None:
        time.sleep(0.005)


def _vertex(name: str) -> str:
    return f'svg.dag g.vertex[data-name="{name}"]'


def _attribute(page: Any, name: str, attribute: str) -> int:
    return int(page.get_attribute(_vertex(name), attribute))


@pytest.mark.timeout(300)
def test_dashboard_shows_back_pressure_and_cancels_the_job(ray_session):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
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
    names = [ejv.name for ejv in client.execution_graph.job_vertices]
    assert names == ["Source: Counting", "Upstream", "Sink: SlowSink"]
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(60_000)
                expect = sync_api.expect
                # the job list: name, state, start, duration, restarts; its name leads to the job page
                page.goto(f"{client.rest_endpoint.url}/")
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
                # the cancel button ends the job
                page.on("dialog", lambda dialog: dialog.accept())
                page.click("#cancel")
                assert client.wait(60), "the job did not end after the dashboard's cancel"
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
    """The session cluster's Dispatcher serves the same dashboard; its cancel button works once
    the browser opened the address printed at start (the token becomes a same-site cookie)."""
    import json

    import ray

    from raylink.actors.dispatcher import dashboard_url
    from raylink.runtime.client.rest_cluster_client import RestJobClient
    from raylink.runtime.client.rest_endpoint import RestEndpoint, _endpoint_file
    from raylink.runtime.runtime_dir import read_private_file

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
    recorded = json.loads(read_private_file(_endpoint_file(ray.get_runtime_context().gcs_address)))
    endpoint = RestEndpoint(recorded["url"], recorded["token"])
    env = make_env("ray", 1)
    env.add_source(CountingSource(), "Counting").rebalance().add_sink(SlowSink()).name("SlowSink")
    client = RestJobClient.submit(endpoint, env, "session dashboard job")
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.set_default_timeout(60_000)
                page.goto(dashboard_url(endpoint.url, endpoint.token))
                assert "token" not in page.url  # the token left the address bar for a cookie
                page.locator(f'#jobs tr[data-jid="{client.job_id}"] a').click()
                expect = sync_api.expect
                expect(page.locator("svg.dag g.vertex")).to_have_count(2)
                page.on("dialog", lambda dialog: dialog.accept())
                page.click("#cancel")
                expect(page.locator("section.job-head .state")).to_have_text("CANCELED")
            finally:
                browser.close()
        with pytest.raises(Exception):
            client.get_job_execution_result(60)
        assert str(client.get_job_status()) == "CANCELED"
    finally:
        if str(client.get_job_status()) not in ("CANCELED", "FAILED", "FINISHED"):
            client.cancel()
