"""tapeproxy in one minute, no API key needed: record against a stand-in provider, replay
offline, see a clear miss, then replay the bundled example cassette.

    python examples/demo.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION: dict[str, object] = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Say hello"}],
}


class StandInProvider(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions like OpenAI would, slowly, so replay's speed shows."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        time.sleep(0.5)
        answer = "Hello from the provider! You said: " + request["messages"][-1]["content"]
        body = json.dumps(
            {
                "id": "chatcmpl-demo",
                "object": "chat.completion",
                "created": 1700000000,
                "model": request["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": answer},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tapeproxy", "serve", "--port", "0", "--log-level", "error", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    ready = process.stdout.readline()
    print(f"  $ tapeproxy serve {' '.join(args)}\n    {ready.strip()}")
    return process, ready.split("ready on ")[-1].strip()


def ask(base: str, question: dict[str, object], path: str = "/openai/v1/chat/completions") -> None:
    request = urllib.request.Request(
        base + path,
        data=json.dumps(question).encode(),
        method="POST",
        headers={"content-type": "application/json", "authorization": "Bearer sk-demo-not-a-key"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request) as response:
            answer = json.loads(response.read())["choices"][0]["message"]["content"]
            took = (time.monotonic() - started) * 1000
            print(f"    {response.status} in {took:.0f} ms: {answer}")
    except urllib.error.HTTPError as error:
        print(
            f"    {error.code}: "
            + json.loads(error.read())["error"]["message"].replace("\n", "\n      ")
        )


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=30)


def main() -> None:
    provider = ThreadingHTTPServer(("127.0.0.1", 0), StandInProvider)
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    upstream = f"openai=http://127.0.0.1:{provider.server_address[1]}"
    with tempfile.TemporaryDirectory() as library:
        print("1. Record: every request goes to the provider and lands in a cassette.")
        process, base = serve("--mode", "record", "--cassettes", library, "--upstream", upstream)
        ask(base, QUESTION)
        stop(process)
        for path in sorted(Path(library).rglob("*.json")):
            print(f"    wrote {path.relative_to(library)}")
        provider.shutdown()

        print("2. Replay, provider gone: the same answer, byte for byte, in milliseconds.")
        process, base = serve("--mode", "replay", "--cassettes", library, "--upstream", upstream)
        ask(base, QUESTION)
        print("3. A request that was never recorded gets a clear miss:")
        ask(base, {**QUESTION, "messages": [{"role": "user", "content": "Say goodbye"}]})
        stop(process)

    print("4. The bundled example cassette (cassettes/example), replayed offline:")
    process, base = serve("--mode", "replay", "--cassette", "example")
    for path in sorted((ROOT / "cassettes" / "example").glob("*.json")):
        recorded = json.loads(path.read_text())["request"]
        if recorded["path"] == "/v1/chat/completions" and "stream" not in recorded["body"]["json"]:
            ask(base, recorded["body"]["json"])
    stop(process)


if __name__ == "__main__":
    main()
