"""Review of stop 11, pure parts: the scribe's wire format (Capture.packed / unpacked) for
every stream dialect cut anywhere, and the journal's swap with writers in flight."""

from __future__ import annotations

import pickle
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.bodies import Payload
from tapeproxy.capture import Capture, Finished, settle
from tapeproxy.normalize import RequestParts
from tapeproxy.providers import BUILTIN, anthropic, gemini, ollama, openai
from tapeproxy.providers.base import Provider
from tapeproxy.scrub import Scrubber
from tapeproxy.spool import SPOOL_AFTER, Spool
from tapeproxy.store import journal

PROVIDERS = {name: provider for name, provider in BUILTIN.items()}

# provider, path, request body, content type, the answer's bytes
SAMPLES: list[tuple[Provider, str, Any, str, bytes]] = [
    (
        openai.PROVIDER,
        "/v1/chat/completions",
        {"model": "m", "stream": True},
        "text/event-stream",
        b'data: {"choices":[{"delta":{"content":"h\xc3\xa9"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n",
    ),
    (
        openai.PROVIDER,
        "/v1/responses",
        {"model": "m", "stream": True},
        "text/event-stream; charset=utf-8",
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"delta":"hi"}\r\n\r\nevent: response.completed\r\ndata: {"type":"response.completed",'
        b'"response":{"usage":{"input_tokens":5,"output_tokens":1}}}\r\n\r\n',
    ),
    (
        anthropic.PROVIDER,
        "/v1/messages",
        {"model": "m", "stream": True, "secret": "hide me"},
        "text/event-stream",
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
        b'{"input_tokens":4}}}\n\nevent: content_block_delta\ndata: {"type":'
        b'"content_block_delta","delta":{"text":"hide me \xff\xfe"}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ),
    (
        gemini.PROVIDER,
        "/v1beta/models/g:streamGenerateContent",
        {"contents": []},
        "application/json; charset=UTF-8",
        b'[{"candidates":[{"content":{"parts":[{"text":"Hel"}]}}],'
        b'"usageMetadata":{"promptTokenCount":4}}\n,\r\n{"candidates":[{"content":{"parts":'
        b'[{"text":"lo"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,'
        b'"candidatesTokenCount":2}}\n]',
    ),
    (
        ollama.PROVIDER,
        "/api/chat",
        {"model": "m"},
        "application/x-ndjson",
        b'{"message":{"content":"a"},"done":false}\n{"message":{"content":"\xe2\x82"},'
        b'"done":false}\n{"done":true,"prompt_eval_count":3,"eval_count":2}\n',
    ),
    (openai.PROVIDER, "/v1/embeddings", {"model": "m"}, "application/json", b'{"data": [1, 2]}'),
    (openai.PROVIDER, "/v1/files", {"model": "m"}, "application/octet-stream", bytes(range(256))),
]


def capture_of(provider: Provider, path: str, body: Any, content_type: str) -> Capture:
    return Capture(
        provider=provider,
        request=RequestParts(
            "POST",
            provider.name,
            path,
            (("a", "b"),),
            (("x-custom", "1"),),
            Payload("json", body, "spaced"),
        ),
        key="k" * 64,
        seq=3,
        rules="r",
        status=200,
        headers=[("content-type", content_type)],
        chunked=True,
        spool=Spool(tempfile.TemporaryFile, keep=SPOOL_AFTER),
    )


@given(
    sample=st.sampled_from(range(len(SAMPLES))),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    keep=st.floats(0.0, 1.0),
    cut=st.booleans(),
    redact=st.booleans(),
)
def test_a_capture_through_the_scribe_s_wire_settles_as_the_server_would(
    sample: int, cuts: list[int], keep: float, cut: bool, redact: bool
) -> None:
    """Any dialect, split anywhere and stopped anywhere (mid-frame, mid-UTF-8 sequence):
    settled after a pickle round trip of `packed`, the same exchange as settled in place."""
    provider, path, body, content_type, data = SAMPLES[sample]
    data = data[: int(len(data) * keep)] if cut else data
    scrubber = Scrubber.build(["secret"], ["hide me"]) if redact else Scrubber.build([], [])

    def settled(mine: Capture) -> Any:
        with patch("tapeproxy.capture.time.monotonic", return_value=mine.started + 0.25):
            done = settle(mine, cut, scrubber, True)
        return done.exchange if isinstance(done, Finished) else done

    made = capture_of(provider, path, body, content_type)
    with patch("tapeproxy.capture.time.monotonic", return_value=made.started + 0.1):
        at = 0
        for point in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
            made.add(data[at:point])
            at = point
    wire = pickle.loads(pickle.dumps(made.packed(), protocol=pickle.HIGHEST_PROTOCOL))
    back = Capture.unpacked(wire, PROVIDERS)
    assert settled(back) == settled(made)


@pytest.mark.skipif(not journal.SUPPORTED, reason="no journal here")
def test_a_swap_with_writers_in_flight_never_hangs_nor_empties_a_half_too_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers journaling all the time while the halves swap every few ms: every swap ends,
    and a half is emptied only once each file it journaled is in place."""
    monkeypatch.setattr(journal, "CHECKPOINT_S", 0.002)
    emptied_early: list[str] = []
    real_checkpoint = journal.Journal._checkpoint

    def checkpoint(self: journal.Journal, half: Any) -> None:
        for rel, data in journal.entries(Path(half.path).read_bytes())[1]:
            if data is not None and (self.root / rel).read_bytes() != data:
                emptied_early.append(rel)
        real_checkpoint(self, half)

    monkeypatch.setattr(journal.Journal, "_checkpoint", checkpoint)
    book = journal.Journal(tmp_path)
    book.open()
    (tmp_path / "c").mkdir()
    assert book.write(tmp_path / "c" / "warm.json", b"{}") is False  # the halves are made
    deadline = time.monotonic() + 5
    while not book._halves and time.monotonic() < deadline:
        time.sleep(0.01)
    stop = time.monotonic() + 1.5
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        count = 0
        try:
            while time.monotonic() < stop:
                path = tmp_path / "c" / f"{n}-{count}.json"
                book.write(path, b'{"n": %d, "count": %d}' % (n, count))
                count += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "a writer hangs"
    closer = threading.Thread(target=book.close)
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "the journal's close hangs"
    assert not errors
    assert not emptied_early, emptied_early[:5]
