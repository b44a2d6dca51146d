"""viewer/conversation.py: a request body read as messages in every dialect, with its tool
calls, tool results and images."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from tapeproxy.viewer.conversation import Part, Reader, stream_tool_calls


def shown(body: Any) -> list[tuple[str, list[tuple[str, str, str]]]]:
    return [(m.role, [(p.kind, p.name, p.text) for p in m.parts]) for m in Reader().messages(body)]


def test_openai_chat_with_a_tool_call_and_its_result() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "function": {"name": "weather", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    }
    assert shown(body) == [
        ("system", [("text", "", "Be brief.")]),
        ("user", [("text", "", "Weather?")]),
        ("assistant", [("tool_call", "weather", "{}")]),  # no content: no empty part
        ("tool", [("tool_result", "c1", "sunny")]),
    ]


def test_anthropic_system_tool_use_and_tool_result_blocks() -> None:
    body = {
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "42"}],
                    }
                ],
            },
        ],
    }
    assert shown(body) == [
        ("system", [("text", "", "Be brief.")]),
        ("assistant", [("tool_call", "f", "{}")]),
        ("user", [("tool_result", "t1", "42")]),
    ]


def test_gemini_and_responses_shapes() -> None:
    gemini = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ],
    }
    assert [(role, [k for k, _, _ in parts]) for role, parts in shown(gemini)] == [
        ("system", ["text"]),
        ("user", ["text"]),
        ("model", ["tool_call"]),
        ("user", ["tool_result"]),
    ]
    responses = {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
        ],
    }
    assert shown(responses)[1:] == [
        ("user", [("text", "", "hi")]),
        ("assistant", [("tool_call", "f", "{}")]),
        ("tool", [("tool_result", "c", "ok")]),
    ]


def test_inline_images_are_kept_and_remote_ones_are_only_named() -> None:
    reader = Reader()
    [message] = reader.messages(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                        {"type": "image", "source": {"media_type": "image/gif", "data": "R0lG"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                    ],
                }
            ]
        }
    )
    assert message.parts == [
        Part("image", "", "image/png", 0),
        Part("image", "", "image/gif", 1),
        Part("link", "https://example.com/x.png", "image"),
    ]
    assert [(i.media_type, i.data) for i in reader.images] == [
        ("image/png", "AAAA"),
        ("image/gif", "R0lG"),
    ]


def test_a_data_url_is_an_inline_image_in_base64_or_percent_encoded_with_any_parameters() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg"/>'
    urls = [
        "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode(),
        "data:image/svg+xml;charset=utf-8," + quote(svg),
        "data:image/svg+xml;utf8," + svg,
        "data:Image/PNG;name=x.png;base64,AAAA",
    ]
    reader = Reader()
    [message] = reader.messages(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": u}} for u in urls],
                }
            ]
        }
    )
    assert [p.kind for p in message.parts] == ["image"] * 4
    found = [(i.media_type, base64.b64decode(i.data)) for i in reader.images]
    assert found == [("image/svg+xml", svg.encode())] * 3 + [("image/png", b"\x00\x00\x00")]


def test_a_body_that_is_no_conversation_is_shown_as_data() -> None:
    assert shown(["a", 1]) == [("request", [("data", "", '[\n  "a",\n  1\n]')])]
    assert shown({"prompt": "why?"}) == [("user", [("text", "", "why?")])]
    assert shown(None) == []


def test_a_streams_tool_calls_are_joined_from_their_pieces() -> None:
    def delta(index: int, **fields: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": fields}

    anthropic = [
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "name": "f"},
        },
        delta(1, type="input_json_delta", partial_json='{"a": '),
        delta(1, type="input_json_delta", partial_json="1}"),
        delta(0, type="text_delta", text="hm"),
    ]
    assert stream_tool_calls(anthropic) == [Part("tool_call", '{"a": 1}', "f")]

    def chunk(index: int, name: str | None, arguments: str) -> dict[str, Any]:
        call = {"index": index, "function": {"name": name, "arguments": arguments}}
        return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}

    openai = [chunk(0, "f", ""), chunk(1, "g", "{}"), chunk(0, None, '{"a"'), chunk(0, None, ":1}")]
    assert stream_tool_calls(openai) == [
        Part("tool_call", '{"a":1}', "f"),
        Part("tool_call", "{}", "g"),
    ]
    assert stream_tool_calls([{"choices": [{"delta": {"content": "hi"}}]}, "[DONE]"]) == []


def test_a_body_or_frame_of_unexpected_shapes_is_read_without_an_error() -> None:
    """A recording holds whatever a client sent and an upstream answered: a field of another
    type than its dialect's is shown as data or skipped, never a 500 from the page."""
    odd_frames = [
        {"choices": 5},
        {"choices": [[{"x": 1}], {"delta": "s"}, {"delta": {"tool_calls": ["s", 5]}}]},
        {"choices": [{"index": "a", "delta": {"tool_calls": [{"index": [1], "function": "f"}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"name": "f", "arguments": {}}}]}}]},
    ]
    assert stream_tool_calls(odd_frames) == [Part("tool_call", "{}", "f")]
    assert shown({"messages": [{"role": "assistant", "tool_calls": 5, "content": "hi"}]}) == [
        ("assistant", [("text", "", "hi")])
    ]


def test_a_data_url_is_read_as_a_browser_reads_it_base64_in_any_case_and_spacing() -> None:
    # The fetch standard's data: URL reading: `;base64` in any case, spaces before it, and
    # the base64 text percent-decoded and freed of white space (as a data URL is wrapped).
    png = b"\x89PNG\r\n\x1a\n"
    coded = base64.b64encode(png).decode()
    urls = [
        "data:image/png;BASE64," + coded,
        "data:image/png; base64," + coded,
        "DATA:image/png;base64," + coded,
        "data:image/png;base64," + coded[:4] + "\n " + coded[4:],
        "data:image/png;base64," + quote(coded, safe=""),
    ]
    reader = Reader()
    [message] = reader.messages(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": u}} for u in urls],
                }
            ]
        }
    )
    assert [p.kind for p in message.parts] == ["image"] * len(urls)
    found = [(i.media_type, base64.b64decode(i.data, validate=True)) for i in reader.images]
    assert found == [("image/png", png)] * len(urls)
