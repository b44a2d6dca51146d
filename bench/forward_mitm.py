"""tapeproxy's forward proxy against mitmproxy's server-replay, 32 connections, the same
recorded answer (issue 40's target: >= 2x mitmproxy's requests per second):

    .venv/bin/python bench/forward_mitm.py --mitmdump PATH/TO/mitmdump [--seconds 5]

Both record one chat completion from an HTTPS fake (a trustme CA), then replay it with the
fake stopped, to an aiohttp client (trust_env off, the proxy given) that keeps 32 tunnels
busy for `--seconds`: CONNECT, TLS with the proxy's own CA, then requests on kept-alive
tunnels. The client is the same Python for both, so at high rates it is part of what is
measured: the ratio is a floor."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trustme
from aiohttp import ClientSession, TCPConnector, web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apps import chat_completion
from bench.forward import BODY, HEADERS, PATH
from bench.procs import start_tapeproxy

CONNECTIONS = 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class HttpsFake:
    """A chat completion over HTTPS on 127.0.0.1, in a thread."""

    def __init__(self, ca: trustme.CA) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(self.context)
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _start(self) -> web.AppRunner:
        async def chat(request: web.Request) -> web.Response:
            return web.Response(
                body=chat_completion("gpt-4o-mini"), content_type="application/json"
            )

        app = web.Application()
        app.router.add_post(PATH, chat)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self.context).start()
        return runner

    def __enter__(self) -> HttpsFake:
        self.thread.start()
        self.runner = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def mitmdump(path: str, port: int, confdir: Path, *options: str) -> subprocess.Popen[bytes]:
    argv = [path, "-q", "--listen-host", "127.0.0.1", "-p", str(port),
            "--set", f"confdir={confdir}", *options]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("mitmdump did not start")


def post_through(proxy_port: int, host: str, port: int, trust: Path) -> None:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", proxy_port, context=ssl.create_default_context(cafile=str(trust))
    )
    connection.set_tunnel(host, port)
    connection.request("POST", PATH, body=BODY, headers=HEADERS)
    answer = connection.getresponse()
    answer.read()
    if answer.status != 200:
        raise RuntimeError(f"recording through the proxy: {answer.status}")


async def load(proxy: str, url: str, trust: Path, seconds: float) -> float:
    """Requests per second through `proxy` at CONNECTIONS connections."""
    context = ssl.create_default_context(cafile=str(trust))
    done, failed = 0, 0
    async with ClientSession(connector=TCPConnector(limit=CONNECTIONS, ssl=context)) as session:
        end = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal done, failed
            while time.monotonic() < end:
                async with session.post(url, data=BODY, headers=HEADERS, proxy=proxy) as answer:
                    await answer.read()
                    done, failed = (
                        (done + 1, failed) if answer.status == 200 else (done, failed + 1)
                    )

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
        elapsed = time.monotonic() - started
    if failed:
        raise RuntimeError(f"{failed} request(s) failed")
    return done / elapsed


def mitmproxy_rate(path: str, work: Path, ca: trustme.CA, seconds: float) -> float:
    confdir, flows = work / "mitm", work / "flows.mitm"
    with HttpsFake(ca) as fake:
        port = free_port()
        recorder = mitmdump(path, port, confdir, "--set", "ssl_insecure=true", "-w", str(flows))
        post_through(port, "127.0.0.1", fake.port, confdir / "mitmproxy-ca-cert.pem")
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)
        target = f"https://127.0.0.1:{fake.port}{PATH}"
    port = free_port()
    replayer = mitmdump(path, port, confdir, "--server-replay", str(flows),
                        "--set", "server_replay_reuse=true", "--set", "connection_strategy=lazy",
                        "--set", "upstream_cert=false")  # fmt: skip
    try:
        trust = confdir / "mitmproxy-ca-cert.pem"
        return asyncio.run(load(f"http://127.0.0.1:{port}", target, trust, seconds))
    finally:
        replayer.send_signal(signal.SIGINT)
        replayer.wait(30)


def tapeproxy_rate(work: Path, ca: trustme.CA, seconds: float) -> float:
    library, ca_file = work / "cassettes", work / "ca.pem"
    common = ("--cassettes", str(library), "--forward", "--ca-cert", str(ca_file))
    bundle = work / "fake-ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    os.environ["SSL_CERT_FILE"] = str(bundle)  # tapeproxy's upstream client trusts the fake
    with HttpsFake(ca) as fake:
        upstream = f"openai=https://127.0.0.1:{fake.port}"
        recorder = start_tapeproxy("record", work, *common, "--mode", "record",
                                   "--log-level", "warning", "--upstream", upstream)  # fmt: skip
        post_through(int(recorder.url.rsplit(":", 1)[1]), "api.openai.com", 443, ca_file)
        recorder.stop()
    replayer = start_tapeproxy("replay", work, *common, "--mode", "replay", "--repeat",
                               "repeat-last", "--log-level", "warning",
                               "--upstream", "openai=http://127.0.0.1:9")  # fmt: skip
    try:
        url = "https://api.openai.com" + PATH
        return asyncio.run(load(replayer.url, url, ca_file, seconds))
    finally:
        replayer.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mitmdump", required=True, help="the mitmdump to compare with")
    parser.add_argument("--seconds", type=float, default=5.0)
    options = parser.parse_args()
    ca = trustme.CA()
    with tempfile.TemporaryDirectory() as folder:
        ours = tapeproxy_rate(Path(folder), ca, options.seconds)
        theirs = mitmproxy_rate(options.mitmdump, Path(folder), ca, options.seconds)
    print(f"tapeproxy forward replay, {CONNECTIONS} connections: {ours:8.0f} req/s")
    print(f"mitmproxy server-replay,  {CONNECTIONS} connections: {theirs:8.0f} req/s")
    print(f"ratio: {ours / theirs:.2f}x (target >= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
