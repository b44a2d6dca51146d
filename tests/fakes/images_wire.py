"""OpenAI's image generation (``POST /v1/images/generations``): a JSON answer holding the
image's base64 (``response_format="b64_json"``), or with ``stream`` an SSE stream of
``image_generation.partial_image`` events and an ``image_generation.completed`` one, each
holding a whole image's base64, as gpt-image-1 streams them. An image is ``WIDTH * HEIGHT``
bytes (``size``), the same for the same prompt and index."""

from __future__ import annotations

import base64
import random

from .wire import JsonOut, Out, StreamOut, WireRequest, sse

CREATED = 1_713_833_628
SSE_TYPE = "text/event-stream; charset=utf-8"
ERROR = {"type": "error", "error": {"type": "server_error", "message": "The server had an error"}}


def image(prompt: str, index: int, size: str) -> str:
    """A made-up image's base64, the same for the same prompt, index and size."""
    width, _, height = size.partition("x")
    count = int(width) * int(height)
    return base64.b64encode(random.Random(f"{prompt}/{index}").randbytes(count)).decode()


def generate(req: WireRequest) -> Out:
    prompt = req.str_field("prompt", "")
    size = req.str_field("size", "256x256")
    usage = {
        "input_tokens": 9,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": 9},
        "output_tokens": 272,
        "total_tokens": 281,
    }
    if not req.body.get("stream"):
        data = [{"b64_json": image(prompt, 0, size)}]
        return JsonOut({"created": CREATED, "data": data, "usage": usage}, indent=2)
    looks = {"background": "opaque", "created_at": CREATED, "output_format": "png"}
    looks |= {"quality": "high", "size": size}
    frames = []
    partials = int(req.body.get("partial_images") or 0)
    for index in range(partials):
        kind = "image_generation.partial_image"
        event = {"type": kind, "b64_json": image(prompt, index, size), **looks}
        frames.append(sse({**event, "partial_image_index": index}, event=kind))
    kind = "image_generation.completed"
    done = {"type": kind, "b64_json": image(prompt, partials, size), **looks, "usage": usage}
    frames.append(sse(done, event=kind))
    return StreamOut(frames, SSE_TYPE, lambda _n: sse(ERROR, event="error"))
