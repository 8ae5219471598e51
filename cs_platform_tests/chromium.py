"""Headless Chromium driven over the DevTools protocol: open a page, wait until its DOM shows what a
test asks of it, keep that DOM and a screenshot.

Why not ``chromium --screenshot --dump-dom --virtual-time-budget``: that renders once Chromium's
virtual time runs out, and a page that keeps polling (Dagster's UI does) can hold it up for good. On
loaded machines it did, twice in fresh clones (14 minutes once) and once in CI on 2026-11-29, where
the 2-minute kill failed the test, while by hand, beside it, the same command took 30 s. Here the test
waits on what it checks, with a deadline that scales with the load, and one browser serves every page
instead of two launches a page.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
from websockets.sync.client import ClientConnection, connect

from cs_platform.dev.deadline import Deadline, wait_until
from cs_platform.dev.process_group import stop_process_group

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",  # Chromium picks a free port and writes it to DevToolsActivePort
]


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("Chromium is needed for the UI check: install it with 'apt-get install chromium' (.ci/run does)")
    return found


class PageNotShown(AssertionError):
    """The page's DOM never showed what the test waited for; the last DOM is kept beside the screenshots."""


class HeadlessChromium:
    """One headless Chromium and its first tab, for the life of a ``with`` block; its profile and
    what it saves live in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        profile = directory / "profile"
        profile.mkdir(parents=True, exist_ok=True)
        active_port = profile / "DevToolsActivePort"
        active_port.unlink(missing_ok=True)  # a previous browser's, on a profile used again
        self.log = open(directory / "chromium.log", "wb")
        self.process = subprocess.Popen([chromium_binary(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                        stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.tab = self._connect(active_port)
        except BaseException:
            self._stop()
            raise
        self.ids = itertools.count(1)

    def _connect(self, active_port: Path) -> ClientConnection:
        """A connection to the browser's first tab, once the browser says on which port it listens."""
        wait_until(lambda: self.process.poll() is not None or active_port.is_file() and active_port.read_text().count("\n") >= 1,
                   60, "Chromium's DevTools port")
        if self.process.poll() is not None:
            raise RuntimeError(f"Chromium exited with {self.process.returncode}; its output is in {self.log.name}")
        port = int(active_port.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            tab = next(t for t in json.load(response) if t["type"] == "page")
        return connect(tab["webSocketDebuggerUrl"], max_size=None, open_timeout=30)

    def _stop(self) -> None:
        stop_process_group(self.process, grace_s=5)
        self.log.close()

    def __enter__(self) -> HeadlessChromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.tab.close()
        self._stop()

    def call(self, method: str, timeout_s: float = 60, **params: Any) -> dict:
        """Send one DevTools command and return its result (events that come first are dropped: none is enabled)."""
        sent = next(self.ids)
        self.tab.send(json.dumps({"id": sent, "method": method, "params": params}))
        deadline = Deadline(timeout_s)
        while not deadline.expired():
            try:
                message = json.loads(self.tab.recv(timeout=1))
            except TimeoutError:
                continue
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
        raise TimeoutError(f"Chromium did not answer {method} within {deadline.describe()}")

    def page(self) -> tuple[str, str]:
        """The tab's address and DOM (none while a navigation has no document yet)."""
        expression = "[location.href, document.documentElement ? document.documentElement.outerHTML : '']"
        found = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in found:  # between documents: the context it ran in went away
            return "", ""
        href, dom = found["result"]["value"]
        return href, dom

    def show(self, url: str, shows: Callable[[str], bool], what: str, name: str, timeout_s: float = 180) -> str:
        """Open ``url``, wait until its DOM ``shows`` what the test needs (``what`` names it), and
        return that DOM; it and a screenshot are kept as ``name``.html and ``name``.png."""
        began = time.monotonic()
        # By way of a blank page: the previous page's DOM, still there while the new one loads, is never read as the new one's.
        self.call("Page.navigate", url="about:blank")
        wait_until(lambda: self.page()[0] == "about:blank", 60, "a blank page")
        self.call("Page.navigate", url=url)
        dom = ""

        def showing() -> bool:
            nonlocal dom
            href, dom = self.page()
            return href != "about:blank" and shows(dom)

        try:
            wait_until(showing, timeout_s, f"{url} showing {what}")
        except TimeoutError as e:
            raise PageNotShown(f"{e}; its DOM is in {self.directory / name}.html") from e
        finally:
            (self.directory / f"{name}.html").write_text(dom)
        png = self.call("Page.captureScreenshot", format="png")["data"]
        (self.directory / f"{name}.png").write_bytes(base64.b64decode(png))
        print(f"{url} showed {what} in {time.monotonic() - began:.1f}s")
        return dom
