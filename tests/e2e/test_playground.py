"""The playground in a real browser (Debian's chromium, driven by Selenium through Debian's
chromedriver; no browser download): a hint goes ready before Enter, the answer streams, and
the page shows the time to first token, the cached tokens and that the hint was used.
Screenshots go to tests/artifacts/ for a person to look at."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.process import RunningGateway, start_gateway

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Debian's chromium and chromium-driver are not installed (make test installs "
        "them as root with apt; else: apt-get install chromium chromium-driver)",
    ),
]
MESSAGE = "Tell me three short facts about the city of Paris and its famous tower please"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(tmp_path_factory.mktemp("playground"))
    yield running
    running.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def wait_for(condition: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("the page never got there")


def ask(browser: Any, message: str) -> dict[str, str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    draft = browser.find_element(By.ID, "draft")
    before = len(browser.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta"))
    for word in message.split(" "):
        draft.send_keys(word + " ")
        time.sleep(0.05)
    hints_on = browser.find_element(By.ID, "hints").is_selected()
    if hints_on:  # a pause: the last progressive hint goes out, and is ready before Enter
        time.sleep(0.6)
        wait_for(
            lambda: browser.find_element(By.ID, "hintstate").get_attribute("data-state") == "ready"
        )
        browser.save_screenshot(str(ARTIFACTS / "playground-hint-ready.png"))
    draft.send_keys(Keys.ENTER)

    def last_meta() -> Any:
        found = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta")
        return found[-1] if len(found) > before else None

    if hints_on:  # mid-answer: TTFT shown and the hint marked as used while it streams
        wait_for(
            lambda: (
                (meta := last_meta()) is not None
                and meta.get_attribute("data-hint") == "used"
                and meta.get_attribute("data-streaming") != "done"
            )
        )
        browser.save_screenshot(str(ARTIFACTS / "playground-mid-answer.png"))
    meta = wait_for(lambda: (m := last_meta()) is not None and m.get_attribute("data-cached") and m)
    return {k: meta.get_attribute(f"data-{k}") for k in ("ttft", "cached", "hint")} | {
        "text": meta.text
    }


def test_typing_hints_at_work_in_a_real_browser(gw: RunningGateway, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ARTIFACTS.mkdir(exist_ok=True)
    browser.get(gw.base_url + "/")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#model option"))
    Select(browser.find_element(By.ID, "model")).select_by_index(0)
    maxtokens = browser.find_element(By.ID, "maxtokens")
    maxtokens.clear()
    maxtokens.send_keys("48")

    with_hint = ask(browser, MESSAGE)
    assert with_hint["hint"] == "used", with_hint
    assert float(with_hint["ttft"]) > 0
    assert int(with_hint["cached"]) > 20  # the system prompt and the typed words
    browser.save_screenshot(str(ARTIFACTS / "playground-answered.png"))

    browser.find_element(By.ID, "hints").click()  # the toggle: the same kind of turn without
    without = ask(browser, "And now two facts about the river that runs through it please")
    assert without["hint"] == "off"
    rows = browser.find_elements(By.CSS_SELECTOR, "#stats tbody tr")
    assert len(rows) == 2
    assert "slot" in browser.find_element(By.ID, "panel").text.lower()
    browser.set_window_size(390, 844)  # a phone-sized screen
    browser.save_screenshot(str(ARTIFACTS / "playground-phone.png"))
    print(f"\nTTFT with hint {with_hint['ttft']} s, without {without['ttft']} s")
