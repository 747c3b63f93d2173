"""The dashboard in a real headless Chromium (Debian's chromium and chromedriver, driven by
Selenium): the overview with jobs in every state, a filtered list, a dead job requeued from its
page, a queue paused until the claim stops, escaped HTML that runs nothing, the refresh pause,
and no console errors on any page. Screenshots go to $DASHBOARD_SCREENSHOTS when set (the
README's picture is made this way), else to the test's own folder."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

import durajobs.dashboard
from durajobs._db import calls
from durajobs._values.states import StepStatus
from support.states import claimed_job, dead_job, delayed_job, done_job, ready_job, stored_state

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# as root, on a closed network: no sandbox, and none of Chromium's own connections
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(database_url) -> Iterator[str]:
    """The dashboard served by uvicorn on a free loopback port, in a thread."""
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            durajobs.dashboard.app(database_url, refresh_seconds=0),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def browser(tmp_path) -> Iterator[webdriver.Chrome]:
    for program in (CHROMIUM, CHROMEDRIVER):
        assert Path(program).exists(), (
            f"no {program} here: scripts/setup --test installs chromium and chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _wait(driver: webdriver.Chrome) -> WebDriverWait[webdriver.Chrome]:
    return WebDriverWait(driver, 10)


def test_the_overview_with_jobs_in_every_state(browser, served, client, tmp_path):
    dead_job(client, "x1", queue="mail")
    done_job(client, "ok1", queue="mail")
    claimed_job(client, "run1", "mail")
    ready_job(client, "r1", queue="mail")
    delayed_job(client, "d1", queue="reports")
    client.run(calls.rollup_counters())
    for path in ("/", "/jobs", "/dead", "/tasks", "/workers", "/limits", "/queues/mail"):
        browser.get(served + path)
        assert browser.find_element(By.TAG_NAME, "h1").text, path
        assert _console_errors(browser) == [], path
    browser.get(served + "/")
    assert browser.find_element(By.CSS_SELECTOR, "svg.chart rect.dead")
    mail = browser.find_element(By.XPATH, "//tr[td/a[text()='mail']]")
    cells = [cell.text for cell in mail.find_elements(By.TAG_NAME, "td")]
    assert cells[1:6] == ["1", "0", "1", "0", "1"]  # ready, delayed, running, suspended, dead
    shot = _shots(tmp_path) / "dashboard-overview.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000


def test_filtering_the_list(browser, served, client):
    wanted = ready_job(client, "keep", queue="billing")
    ready_job(client, "other", queue="mail")
    browser.get(served + "/jobs")
    field = browser.find_element(By.NAME, "queue")
    field.send_keys("billing")
    field.submit()
    _wait(browser).until(expected_conditions.url_contains("queue=billing"))
    links = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "td a code")]
    assert links == [str(wanted)]
    assert _console_errors(browser) == []


def test_requeue_a_dead_job_and_see_it_ready(browser, served, client, tmp_path):
    id = dead_job(client, "to-requeue")
    browser.get(f"{served}/jobs/{id}")
    browser.find_element(By.XPATH, "//button[text()='Requeue']").click()
    _wait(browser).until(expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()  # the confirmation
    _wait(browser).until(expected_conditions.url_contains("done="))
    state = browser.find_element(By.CSS_SELECTOR, "dd span.state")
    assert state.text == "ready"
    assert "requeue done" in browser.find_element(By.CSS_SELECTOR, "p.done").text
    assert stored_state(client, id) == ("ready",)
    browser.save_screenshot(str(_shots(tmp_path) / "dashboard-job.png"))
    assert _console_errors(browser) == []


def test_declining_the_confirmation_does_nothing(browser, served, client):
    id = dead_job(client, "kept-dead")
    browser.get(f"{served}/jobs/{id}")
    browser.find_element(By.XPATH, "//button[text()='Requeue']").click()
    _wait(browser).until(expected_conditions.alert_is_present())
    browser.switch_to.alert.dismiss()
    time.sleep(0.3)
    assert stored_state(client, id) == ("dead",)


def test_pause_a_queue_and_the_claim_stops(browser, served, client):
    ready_job(client, "waiting", queue="mail")
    browser.get(served + "/")
    row = browser.find_element(By.XPATH, "//tr[td/a[text()='mail']]")
    row.find_element(By.XPATH, ".//button[text()='Pause']").click()
    _wait(browser).until(expected_conditions.url_contains("/queues/mail"))
    assert client.claim(["mail"], "w-browser", batch_size=1) == []
    browser.find_element(By.XPATH, "//button[text()='Resume queue']").click()
    _wait(browser).until(expected_conditions.url_contains("resumed"))
    assert len(client.claim(["mail"], "w-browser", batch_size=1)) == 1


def test_script_in_a_jobs_data_runs_nothing(browser, served, client):
    attack = "<script>alert('x')</script><img src=x onerror=alert('y')>"
    claimed = claimed_job(client, "xss", "q", max_attempts=1)
    client.run(calls.record_step(claimed.fence, attack, StepStatus.COMPLETED, output={}))
    client.nack(claimed.fence, error=attack)
    client.connection.execute(
        "update jobs.jobs_history set input = jsonb_build_object('key', %s::text) where id = %s",
        [attack, claimed.id],
    )
    for path in (f"/jobs/{claimed.id}", "/jobs", "/dead"):
        browser.get(served + path)
        time.sleep(0.2)
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 (reading it is the check)
    browser.get(f"{served}/jobs/{claimed.id}")
    assert attack in browser.find_element(By.CSS_SELECTOR, "pre.error").text


def test_the_refresh_can_be_paused(browser, served, client):
    browser.get(served + "/")
    toggle = browser.find_element(By.ID, "refresh-toggle")
    assert toggle.text == "Pause refresh"
    toggle.click()
    assert toggle.text == "Resume refresh"
    browser.refresh()  # the choice is kept
    assert browser.find_element(By.ID, "refresh-toggle").get_attribute("aria-pressed") == "true"
