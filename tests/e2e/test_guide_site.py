"""The user guide as a reader gets it: `mkdocs build --strict` of docs/ (a broken link, a stale
anchor or a page left out of the nav fails it), then the built site opened from the filesystem
(file://) in Debian's headless Chromium, its search tried, nothing loaded from another host.
A screenshot of the getting-started page goes to .ci/artifacts/ (CI keeps it). Where mkdocs or
the browser is not installed the tests skip, saying so; under CI they fail instead."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ARTIFACTS, chromium, requested
from tests.support.serve import ROOT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import ElementNotInteractableException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

MUST_RUN = "pip install -e '.[docs]' (.ci/run does)"


def _needs_mkdocs() -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI"):
            pytest.fail(f"the guide must be built in CI: no mkdocs-material; {MUST_RUN}")
        pytest.skip(f"no mkdocs or mkdocs-material installed; {MUST_RUN}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide built as CI builds it, into a temporary folder."""
    _needs_mkdocs()
    built = tmp_path_factory.mktemp("guide") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"},
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    return built


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as started:
        yield started


def test_the_strict_build_has_every_page_and_both_generated_references(site: Path) -> None:
    for page in ("index", "getting-started", "faults", "how-it-is-built", "performance"):
        assert (site / f"{page}.html").is_file(), page
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "tapeproxy serve" in cli and "--max-body" in cli
    settings = (site / "reference" / "configuration.html").read_text(encoding="utf-8")
    assert "TAPEPROXY_MAX_BODY" in settings
    assert (site / "viewer.png").is_file()  # the viewer's screenshot, shown in looking.html
    assert 'src="viewer.png"' in (site / "looking.html").read_text(encoding="utf-8")


def test_search_works_from_the_filesystem_with_nothing_from_another_host(
    site: Path, browser: Any
) -> None:
    browser.get((site / "index.html").as_uri())
    loaded = requested(browser)  # the log so far: the page and what it loaded
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    try:
        box.click()
        box.send_keys("rebinding")  # a word only "Limits and security" holds
    except ElementNotInteractableException:
        pytest.fail(
            "the search box is not usable from file:// (its web worker did not start); "
            f"the page asked for: {loaded + requested(browser)}"
        )

    def titles(b: Any) -> list[str]:
        items = b.find_elements(By.CSS_SELECTOR, "li.md-search-result__item")
        return [item.text.splitlines()[0] for item in items if item.text]

    found = WebDriverWait(browser, 20).until(
        lambda b: (shown := titles(b)) and "Limits and security" in shown and shown
    )
    assert found[0] == "Limits and security", found
    browser.save_screenshot(str(ARTIFACTS / "guide-search.png"))
    seen = loaded + requested(browser)
    foreign = [url for url in seen if not url.startswith(("file://", "data:", "blob:", "about:"))]
    assert foreign == [], f"the guide loaded from another host: {foreign}"


def test_the_getting_started_page_renders_with_its_recipe_and_is_kept_as_a_screenshot(
    site: Path, browser: Any
) -> None:
    browser.get((site / "getting-started.html").as_uri())
    assert browser.title.startswith("Getting started")
    code = browser.find_element(By.CSS_SELECTOR, "article").text
    assert 'api_key="replay-needs-no-key"' in code
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav.md-nav a") if a.text]
    assert "Faults" in nav and "Command line" in nav
    shot = ARTIFACTS / "guide-getting-started.png"
    shot.unlink(missing_ok=True)
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    foreign = [u for u in requested(browser) if not u.startswith(("file://", "data:", "blob:"))]
    assert foreign == [], f"the guide loaded from another host: {foreign}"
