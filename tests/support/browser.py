"""Debian's headless Chromium for the browser tests (the viewer, the guide), driven by selenium
through the system's chromedriver, given by path: nothing is downloaded. Where the browser is
not installed a test skips, saying so; under CI it fails instead."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.serve import ROOT

BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVERS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
ARTIFACTS = ROOT / ".ci" / "artifacts"


def found(paths: tuple[str, ...], name: str) -> str:
    """The first of `paths` that runs, else `name` on PATH; else skip (fail under CI)."""
    path = next((p for p in paths if os.access(p, os.X_OK)), None) or shutil.which(name)
    if path is None:
        why = f"no {name} installed (apt-get install chromium chromium-driver; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI: {why}")
        pytest.skip(why)
    return path


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium that loads nothing from another host: whatever a page asks of one
    goes to a dead proxy and fails, and `requested` says whether anything was even asked."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = found(BROWSERS, "chromium"), found(DRIVERS, "chromedriver")
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager, should it run, fetches nothing
    options = Options()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--proxy-server=http://127.0.0.1:9",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    started = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    started.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield started
    finally:
        started.quit()


def requested(browser: Any) -> list[str]:
    """Every URL the browser asked for since the last call (Chrome's performance log)."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
