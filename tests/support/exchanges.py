"""Small exchanges to store: a two-frame SSE answer, its key, ordinal, text and timing chosen."""

from __future__ import annotations

from typing import Any

from tapeproxy.exchange.model import Exchange, Frame, StoredRequest, StoredResponse

KEY_A, KEY_B = "a" * 64, "0123456789abcdef" * 4


def exchange(
    key: str = KEY_A, ordinal: int = 1, text: str = "data: hi\n\n", ms: int = 5, **extra: Any
) -> Exchange:
    values: dict[str, Any] = {"seq": 0, "rules": "r", **extra}
    return Exchange(
        key=key,
        ordinal=ordinal,
        request=StoredRequest(method="POST", upstream="openai", path="/v1/x"),
        response=StoredResponse(
            status=200,
            headers={"content-type": "text/event-stream"},
            dialect="sse",
            frames=[Frame(ms=0, text="data: start\n\n"), Frame(ms=ms, text=text)],
        ),
        **values,
    )
