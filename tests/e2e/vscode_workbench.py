"""A harness for tests/e2e/test_vscode.py: code-server started with an extension installed,
Debian's chromium under Selenium, and a driver of VS Code's workbench in the browser as a
person uses it (the keyboard, the command palette, quick inputs, a webview's nested frames)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from testsupport.process import free_port

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".cache" / "vscode"
CODE_SERVER = TOOLS / "code-server" / "node_modules" / ".bin" / "code-server"
NODE_BIN = TOOLS / "node" / "node_modules" / "node" / "bin"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# The workbench quiet: no welcome page, trust prompt, tips, update checks or AI side bar.
QUIET_SETTINGS = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "security.workspace.trust.enabled": False,
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "files.simpleDialog.enable": True,
    "editor.minimap.enabled": False,
    "chat.disableAIFeatures": True,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
}


@dataclass
class CodeServer:
    url: str
    workspace: Path
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def code_server(
    root: Path, workspace: Path, vsix: Path, settings: dict[str, Any]
) -> Iterator[CodeServer]:
    """code-server on 127.0.0.1 (no password) with `vsix` installed and `settings` as the
    user's, its data under `root`, `workspace` open; stopped on exit."""
    data, extensions = root / "data", root / "extensions"
    (data / "User").mkdir(parents=True)
    (data / "User" / "settings.json").write_text(json.dumps(QUIET_SETTINGS | settings, indent=1))
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}"}
    common = ["--user-data-dir", str(data), "--extensions-dir", str(extensions)]
    subprocess.run(
        [str(CODE_SERVER), *common, "--install-extension", str(vsix)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = free_port()
    log = root / "code-server.log"
    config = root / "config.yaml"  # its own: code-server would write one under ~/.config
    config.write_text(f"bind-addr: 127.0.0.1:{port}\nauth: none\ncert: false\n")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(CODE_SERVER),
                *common,
                "--config",
                str(config),
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
                str(workspace),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("code-server did not start:\n" + log.read_text()[-3000:])
            time.sleep(0.2)
        yield CodeServer(url, workspace, process, log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def chromium(profile: Path, screenshot_at_exit: Path) -> Iterator[Any]:
    """Debian's chromium, headless, through Debian's chromedriver; on exit (a failure
    included) what the page showed is saved to `screenshot_at_exit`."""
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
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        screenshot_at_exit.parent.mkdir(exist_ok=True)
        driver.switch_to.default_content()
        driver.save_screenshot(str(screenshot_at_exit))
        driver.quit()


def wait_for(condition: Any, timeout: float = 60.0, what: str = "the page") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # the DOM changes under us (stale elements, frames not there yet)
            value = None
        if value:
            return value
        time.sleep(0.2)  # each look is a few WebDriver calls: they compete with the model for CPU
    raise AssertionError(f"{what} never got there")


class Workbench:
    """VS Code in the browser, as a person drives it: the keyboard, the command palette, and
    the chat panel's webview (nested iframes: the workbench's, then its active frame)."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def keys(self, *keys: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(self.driver).send_keys(*keys).perform()

    def chord(self, modifier: str, *keys: str) -> None:
        """`keys` with `modifier` held down (ctrl+home, shift+down...)."""
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(self.driver).key_down(modifier).send_keys(*keys).key_up(modifier).perform()

    def palette(self, command: str) -> None:
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        self.driver.switch_to.default_content()

        def box() -> Any:
            found = self.driver.find_elements(By.CSS_SELECTOR, ".quick-input-box input")
            return found[0] if found and found[0].is_displayed() else None

        wait_for(lambda: box() is None, what="the last quick input closed")
        self.keys(Keys.F1)
        try:
            palette = wait_for(box, timeout=3, what="the command palette")
            palette.send_keys(command)
        except (AssertionError, WebDriverException):
            # F1 went to a webview still loading: the title bar's command center, then ">".
            self.driver.find_element(By.CSS_SELECTOR, ".command-center-center").click()
            palette = wait_for(box, what="the command palette")
            palette.send_keys(">" + command)
        wait_for(
            lambda: (
                command.lower()
                in self.driver.find_element(
                    By.CSS_SELECTOR, ".quick-input-list .monaco-list-row.focused"
                ).text.lower()
            ),
            what=f"the command {command!r}",
        )
        palette.send_keys(Keys.ENTER)

    def quick_input(self, text: str, *, per_char: float = 0.0) -> None:
        """Types into the open quick input (a dialog's path, an input box) and presses Enter."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        box = self.driver.find_element(By.CSS_SELECTOR, ".quick-input-box input")
        for char in text if per_char else [text]:
            box.send_keys(char)
            time.sleep(per_char)
        box.send_keys(Keys.ENTER)

    def import_conversation(self, path: Path) -> None:
        """ "Onemac: Import Conversation", `path` given to its open dialog."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        for _attempt in range(3):
            self.palette("Onemac: Import Conversation")
            if self.open_in_dialog(path):
                break
            self.keys(Keys.ESCAPE)  # and again, from the command palette
        self.in_panel()
        wait_for(
            lambda: (
                self.driver.find_element(By.ID, "transcript").get_attribute("data-messages") == "9"
            ),
            what=f"the imported conversation {path.name}",
        )

    def open_in_dialog(self, path: Path) -> bool:
        """Types `path` into VS Code's simple file dialog and opens it. The dialog completes
        names as they are typed: a path it got wrong is typed again, an Enter it let pass
        (while it checked the path) pressed again."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        box = wait_for(
            lambda: (
                (b := self.driver.find_element(By.CSS_SELECTOR, ".quick-input-box input"))
                .get_attribute("value")
                .startswith("/")
                and b
            ),
            what="the open dialog",
        )

        def typed() -> bool:
            return bool(box.get_attribute("value") == str(path))

        for _typing in range(3):
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(str(path))
            try:
                wait_for(typed, timeout=3, what="the path")
                break
            except AssertionError:
                continue
        for _enter in range(5):
            if not typed():
                return False
            box.send_keys(Keys.ENTER)
            try:
                wait_for(lambda: not box.is_displayed(), timeout=3, what="the dialog closed")
                return True
            except AssertionError:
                continue
        return False

    def in_panel(self) -> None:
        """Switches into the chat panel's page."""
        from selenium.webdriver.common.by import By

        self.driver.switch_to.default_content()

        def enter() -> bool:
            self.driver.switch_to.default_content()
            outer = [
                f
                for f in self.driver.find_elements(By.CSS_SELECTOR, "iframe.webview")
                if f.is_displayed()
            ]
            if not outer:
                return False
            self.driver.switch_to.frame(outer[0])
            self.driver.switch_to.frame(self.driver.find_element(By.ID, "active-frame"))
            return bool(self.driver.find_elements(By.ID, "draft"))

        wait_for(enter, what="the chat panel")

    def ask(self, question: str, *, hints: bool, per_char: float = 0.04) -> dict[str, str]:
        """Types `question` in the panel, one character at a time (`per_char` seconds apart),
        and sends it with Enter; returns the numbers the panel shows for the answer."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        self.in_panel()
        toggle = self.driver.find_element(By.ID, "hints")
        if toggle.is_selected() != hints:
            toggle.click()
        before = len(self.driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta"))
        draft = self.driver.find_element(By.ID, "draft")
        if per_char:
            for char in question:
                draft.send_keys(char)
                time.sleep(per_char)
        else:  # still key by key, as chromedriver types, without pauses
            draft.send_keys(question)
        badge = self.driver.find_element(By.ID, "hintstate")
        if hints:  # a person's pause before Enter: the last progressive hint goes out, is ready
            time.sleep(0.6)
            wait_for(lambda: badge.get_attribute("data-state") == "ready", what="a ready hint")
        else:
            assert badge.get_attribute("data-state") == "none"
        hint_id = badge.get_attribute("data-id")
        draft.send_keys(Keys.ENTER)

        def meta() -> Any:
            found = self.driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta")
            return (
                found[-1]
                if len(found) > before and found[-1].get_attribute("data-cached")
                else None
            )

        done = wait_for(meta, timeout=120, what="the answer")
        answer = self.driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .text")[-1].text
        shown = {k: done.get_attribute(f"data-{k}") for k in ("ttft", "cached", "prompt", "hint")}
        return shown | {"hint_id": hint_id, "answer": answer, "meta": done.text}
