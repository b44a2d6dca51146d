"""The cassette viewer in a real browser: Debian's headless Chromium, driven by selenium through
the system's chromedriver (given by path: nothing is downloaded). One browser and one
`tapeproxy view` for the module; screenshots go to .ci/artifacts/ (CI keeps them).
Where the browser is not installed the tests skip, saying so; under CI they fail instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.browser import ARTIFACTS, chromium, requested
from tests.support.serve import ROOT, Serve
from tests.support.viewer import IMAGE_FILE, OPENAI, PAYLOAD, View, make_library

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[View]:
    tmp = tmp_path_factory.mktemp("browser")
    started = View(make_library(tmp), tmp)
    assert started.url.startswith("http://127.0.0.1:"), started.ready
    yield started
    started.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as started:
        yield started


def shot(browser: Any, name: str) -> None:
    assert browser.save_screenshot(str(ARTIFACTS / f"viewer-{name}.png"))


def test_the_library_leads_to_an_exchange_shown_as_a_conversation(browser: Any, view: View) -> None:
    browser.get(view.url)
    names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#library a.cassette")]
    assert {"example", "examples/python-agent", "examples/anthropic-agent"} <= set(names)
    shot(browser, "library")
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "example"), "#exchanges")
    links = browser.find_elements(By.CSS_SELECTOR, "#exchanges a.exchange")
    assert len(links) == 3
    click_and_wait(browser, next(a for a in links if OPENAI in a.get_attribute("href")), "#answer")
    conversation = browser.find_element(By.ID, "conversation").text
    answer = browser.find_element(By.ID, "answer").text
    assert "What is the capital of France?" in conversation
    assert "echo: What is the capital of France?" in answer
    browser.get(view.url + "exchange?cassette=examples/python-agent&file=" + _last_agent_file())
    assert "get_weather" in browser.find_element(By.ID, "conversation").text
    shot(browser, "exchange")


def _last_agent_file() -> str:
    return sorted(p.name for p in (ROOT / "cassettes/examples/python-agent").glob("*.json"))[0]


def test_a_click_anywhere_on_a_row_opens_what_its_link_opens(browser: Any, view: View) -> None:
    browser.get(view.url)
    library_row = next(
        row
        for row in browser.find_elements(By.CSS_SELECTOR, "#library tbody tr")
        if row.find_element(By.CSS_SELECTOR, "a.cassette").text == "example"
    )
    # A number cell, away from the link: as in mitmweb, the whole row is the target.
    click_and_wait(browser, library_row.find_elements(By.CSS_SELECTOR, "td.n")[0], "#exchanges")
    assert urlsplit(browser.current_url).query == "name=example"
    row = next(
        row
        for row in browser.find_elements(By.CSS_SELECTOR, "#exchanges tbody tr")
        if OPENAI[:12] in row.text
    )
    link = row.find_element(By.CSS_SELECTOR, "a.exchange")
    href = link.get_attribute("href")
    click_and_wait(browser, row.find_element(By.TAG_NAME, "code"), "#answer")
    assert browser.current_url == href
    assert "echo: What is the capital of France?" in browser.find_element(By.ID, "answer").text


def test_the_rows_link_stays_and_the_keyboard_opens_it(browser: Any, view: View) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(view.url + "cassette?name=example")
    link = next(
        a
        for a in browser.find_elements(By.CSS_SELECTOR, "#exchanges a.exchange")
        if OPENAI in (a.get_attribute("href") or "")
    )
    for _ in range(40):  # Tab through the page, as a keyboard user does, to the row's link
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if browser.switch_to.active_element == link:
            break
    assert browser.switch_to.active_element == link
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "answer"))
    assert OPENAI in browser.current_url


def test_an_svg_thumbnail_shows_and_opened_alone_runs_no_script(browser: Any, view: View) -> None:
    browser.get(view.url + f"exchange?cassette=example-xss&file={IMAGE_FILE}")
    thumbs = browser.find_elements(By.CSS_SELECTOR, "#main img.thumb")
    assert [t.get_attribute("alt") for t in thumbs] == [
        "image 0 (image/png)",
        "image 1 (image/svg+xml)",
    ]
    svg = thumbs[1]
    assert browser.execute_script("return arguments[0].complete", svg) is True
    assert browser.execute_script("return arguments[0].naturalWidth", svg) == 16, "it shows"
    assert browser.execute_script("return window.__pwned === undefined") is True
    shot(browser, "svg-thumbnail")
    # Its link opens the picture as a document of its own, where an SVG could run script.
    browser.get(svg.find_element(By.XPATH, "..").get_attribute("href"))
    assert browser.execute_script("return window.__pwned === undefined") is True
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - asking is the check
    # The pages' policy alone already stops its inline script: what the SVG's own adds is
    # that nothing of the viewer's origin runs there (the sandbox: an origin of its own)...
    assert browser.execute_script("return window.origin") == "null"
    # ...and that it loads nothing, not even the viewer's own script (its <script href>).
    loaded = "return performance.getEntriesByType('resource').map(e => e.name)"
    assert browser.execute_script(loaded) == []


def test_the_diff_page_highlights_the_changed_field(browser: Any, view: View) -> None:
    browser.get(view.url)
    Select(browser.find_element(By.NAME, "a")).select_by_visible_text("example")
    Select(browser.find_element(By.NAME, "b")).select_by_visible_text("example-xss")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.compare button"), "#diff")
    marked = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#diff mark")]
    assert "response.body.choices[0].message.content" in marked
    assert "echo: What is the capital of France?" in browser.find_element(By.ID, "diff").text
    shot(browser, "diff")


def click_and_wait(browser: Any, element: Any, arrived: str) -> None:
    """Click a link or button that loads another page, and wait for that page: a click does
    not always wait for the navigation it starts (a form's submit, on a busy machine)."""
    from selenium.webdriver.support.ui import WebDriverWait

    element.click()
    WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, arrived))


def test_a_recorded_answer_with_markup_runs_nothing_and_shows_as_text(
    browser: Any, view: View
) -> None:
    for page in (f"exchange?cassette=example-xss&file={OPENAI}", "diff?a=example&b=example-xss"):
        browser.get(view.url + page)
        assert browser.execute_script("return window.__pwned === undefined") is True
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - asking is the check
        assert PAYLOAD.split(" <script>")[0] in browser.find_element(By.ID, "main").text
        assert not browser.find_elements(By.CSS_SELECTOR, "#main img[src=x], #main script")


def test_no_request_leaves_loopback(browser: Any, view: View) -> None:
    requested(browser)  # what earlier tests asked is theirs
    image = f"exchange?cassette=example-xss&file={IMAGE_FILE}"
    for page in ("", "cassette?name=example", image, "diff?a=example&b=example-xss", "misses"):
        browser.get(view.url + page)
    asked = requested(browser)
    assert any("/image?" in url for url in asked), asked  # the thumbnail came from the page
    assert any(url.endswith("static/viewer.css") for url in asked), asked
    elsewhere = [url for url in asked if urlsplit(url).hostname not in LOOPBACK]
    assert elsewhere == []
    shot(browser, "image")


def test_a_running_servers_page_shows_a_new_miss_without_a_reload(
    browser: Any, tmp_path: Path
) -> None:
    import httpx
    from selenium.webdriver.support.ui import WebDriverWait

    library = make_library(tmp_path)
    server = Serve(["--cassettes", str(library), "--cassette", "example"], tmp_path)
    try:
        browser.get(server.url + "/__tapeproxy/ui/misses")
        assert browser.find_element(By.ID, "no-misses")
        browser.execute_script("window.__same_page = true")
        asked = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Lyon?"}]}
        httpx.post(server.url + "/openai/v1/chat/completions", json=asked)
        # viewer.js polls every 2 s; the page's own script global survives: no reload.
        WebDriverWait(browser, 20).until(
            lambda b: "body.messages[0].content" in b.find_element(By.ID, "main").text
        )
        assert browser.execute_script("return window.__same_page") is True
        shot(browser, "misses")
    finally:
        server.stop()
