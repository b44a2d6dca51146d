"""The viewer on a large cassette, as a user runs `tapeproxy view`: a page of 200 exchanges
with next and previous, and SIGTERM obeyed within the grace whatever a page is doing."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx

from tapeproxy.store.files import FileStore
from tests.support.exchanges import exchange
from tests.support.viewer import View


def test_a_cassette_of_many_exchanges_is_shown_a_page_at_a_time(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "cassettes")
    for n in range(450):
        store.write("many", exchange(f"{n:064x}", seq=n), fresh=True)
    view = View(tmp_path / "cassettes", tmp_path)
    try:
        first = httpx.get(view.url + "cassette?name=many", timeout=60).text
        assert "450 exchange(s)" in first and "exchanges 1 to 200 of 450" in first
        assert first.count('class="exchange"') == 200
        assert 'rel="next" href="cassette?name=many&amp;start=200"' in first
        assert 'rel="prev"' not in first
        last = httpx.get(view.url + "cassette?name=many&start=400", timeout=60).text
        assert "exchanges 401 to 450 of 450" in last and last.count('class="exchange"') == 50
        assert 'rel="prev" href="cassette?name=many&amp;start=200"' in last
        assert 'rel="next"' not in last
        seqs = [int(n) for n in re.findall(r'<td class="n">(\d+)</td>\s*<td>POST', last)]
        assert seqs == list(range(400, 450)), "in recorded order"
        beyond = httpx.get(view.url + "cassette?name=many&start=9999", timeout=60).text
        assert "exchanges 401 to 450 of 450" in beyond, "past the end: the last page"
        huge = httpx.get(view.url + f"cassette?name=many&start={'9' * 5000}", timeout=60)
        assert huge.status_code == 200 and "exchanges 401 to 450 of 450" in huge.text
        for odd in ("\u00b2", "-5", "x"):  # a superscript two: a digit to str.isdigit
            page = httpx.get(view.url + f"cassette?name=many&start={odd}", timeout=60)
            assert page.status_code == 200 and "exchanges 1 to 200 of 450" in page.text, odd
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_a_library_of_many_cassettes_is_shown_a_page_at_a_time(tmp_path: Path) -> None:
    """A page reads the summaries of its own 200 cassettes only: one cassette's file changed
    behind its back is seen on its page; every name is offered to compare."""
    store = FileStore(tmp_path / "cassettes")
    for n in range(450):
        store.write(f"c{n:03}", exchange(seq=n), fresh=True)
    view = View(tmp_path / "cassettes", tmp_path)
    try:
        first = httpx.get(view.url, timeout=60).text
        assert "cassettes 1 to 200 of 450" in first and first.count('class="cassette"') == 200
        assert 'rel="next" href="./?start=200"' in first and 'rel="prev"' not in first
        assert first.count("<option") == 2 * 450, "each cassette may be compared"
        last = httpx.get(view.url + "?start=400", timeout=60).text
        shown = re.findall(r'class="cassette" href="cassette\?name=(c\d+)"', last)
        assert shown == [f"c{n:03}" for n in range(400, 450)]
        assert 'rel="prev" href="./?start=200"' in last and 'rel="next"' not in last
        for odd in ("9" * 5000, "\u00b2", "-5"):
            page = httpx.get(view.url + f"?start={odd}", timeout=60)
            assert page.status_code == 200 and "cassettes" in page.text, odd
        store.write("c420", exchange(seq=1, usage={"input_tokens": 777, "output_tokens": 1}))
        assert "777" in httpx.get(view.url + "?start=400", timeout=60).text
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_sigterm_stops_the_viewer_within_its_grace_while_a_page_is_stuck(tmp_path: Path) -> None:
    """A page that never ends: an exchange file that is a named pipe no one writes to."""
    store = FileStore(tmp_path / "cassettes")
    store.write("stuck", exchange())
    os.mkfifo(tmp_path / "cassettes" / "stuck" / f"{'b' * 64}.json")
    view = View(tmp_path / "cassettes", tmp_path)
    asked = threading.Thread(
        target=lambda: httpx.get(view.url + "cassette?name=stuck", timeout=60), daemon=True
    )
    asked.start()
    time.sleep(1)  # the page is under way (it cannot end): then the signal
    started = time.monotonic()
    code, err = view.stop(signal.SIGTERM)
    assert code == 0, err
    assert time.monotonic() - started < 10, "within the grace (3 s), not when the page ends"
