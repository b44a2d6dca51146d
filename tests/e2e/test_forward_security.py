"""The forward proxy's edges: a host it does not intercept (tunnelled untouched, or refused in
a replay and named), its exposure rules (407 off loopback, CONNECT ports, itself), bad input
(a malformed CONNECT, a stalled handshake, a client that refuses its certificate), no key on
disk, and the reverse routes on the same port as ever."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tapeproxy.forward import connection
from tests.conftest import MakeProxy
from tests.e2e.test_forward_proxy import CURL, DEAD, tapeproxy_run
from tests.fakes.raw import KeepAliveUpstream
from tests.fakes.upstream import FakeUpstream
from tests.support import ProxyServer
from tests.support.serve import Serve

TOKEN = "forward-admin-token-0123456789"
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"n": "ok"}'


def connect(proxy: ProxyServer, target: str, extra: str = "") -> tuple[socket.socket, bytes]:
    """A raw CONNECT through `proxy`; the socket and the answer's head."""
    port = int(proxy.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{extra}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head


def logged(caplog: pytest.LogCaptureFixture, words: str) -> str:
    """The log once it holds `words` (the proxy logs on its own thread), or after 5 s."""
    for _ in range(100):
        if words in caplog.text:
            break
        time.sleep(0.05)
    return caplog.text


@pytest.fixture
def own_ca_server(tmp_path: Path) -> Iterator[tuple[KeepAliveUpstream, Path]]:
    """An HTTPS server on 127.0.0.1 with a CA of its own (in the returned file)."""
    ca = trustme.CA()
    trust = tmp_path / "own-ca.pem"
    ca.cert_pem.write_to_path(str(trust))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with KeepAliveUpstream(tls=context) as up:
        up.answer(OK)
        yield up, trust


def test_a_host_not_intercepted_is_tunnelled_with_its_own_certificate(
    tmp_path: Path, own_ca_server: tuple[KeepAliveUpstream, Path]
) -> None:
    up, trust = own_ca_server
    cassettes = tmp_path / "cassettes"
    # curl trusts only the server's own CA: it succeeds only if it sees that server's cert.
    # (--noproxy '' : the run's NO_PROXY covers loopback, and this server is on it.)
    curl = ("curl", "-sS", "--noproxy", "", "--cacert", str(trust), up.url + "/x")
    done = tapeproxy_run(cassettes, "record", up.url, *curl, extra=("--upstream", f"own={up.url}"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"n": "ok"}
    assert f"tunnelled {up.url.removeprefix('https://')}" in done.stderr
    assert not [p for p in cassettes.rglob("*") if p.is_file() and p.suffix == ".json"]


def test_the_roots_the_users_environment_names_are_still_trusted(
    tmp_path: Path, own_ca_server: tuple[KeepAliveUpstream, Path]
) -> None:
    up, trust = own_ca_server  # (a company's root, say, that curl is told of)
    curl = ("curl", "-sS", "--noproxy", "", up.url + "/x")
    extra = ("--upstream", f"own={up.url}")
    env = {"CURL_CA_BUNDLE": str(trust)}
    done = tapeproxy_run(tmp_path / "cassettes", "record", up.url, *curl, extra=extra, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"n": "ok"}


def test_in_replay_it_is_refused_and_named(
    tmp_path: Path, own_ca_server: tuple[KeepAliveUpstream, Path]
) -> None:
    up, trust = own_ca_server
    curl = ("curl", "-sS", "--noproxy", "", "--cacert", str(trust), up.url + "/x")
    extra = ("--upstream", f"own={up.url}")
    done = tapeproxy_run(tmp_path / "cassettes", "replay", up.url, *curl, extra=extra)
    assert done.returncode != 0  # curl: the CONNECT was answered 403
    target = up.url.removeprefix("https://")
    assert f"refused {target}" in done.stderr.splitlines()[-1]
    assert up.connections == 0


def test_a_mode_switched_to_replay_refuses_the_hosts_not_intercepted(
    make_proxy: MakeProxy, own_ca_server: tuple[KeepAliveUpstream, Path]
) -> None:
    up, _ = own_ca_server
    proxy = make_proxy(forward=True, mode="record", upstream={"own": up.url})  # (its port)
    switched = httpx.put(proxy.url + "/__tapeproxy/cassette", json={"mode": "replay"})
    assert switched.status_code == 200, switched.text
    sock, head = connect(proxy, up.url.removeprefix("https://"))
    sock.close()
    assert head.startswith(b"HTTP/1.1 403 ") and up.connections == 0
    httpx.put(proxy.url + "/__tapeproxy/cassette", json={"mode": "record"})
    sock, head = connect(proxy, up.url.removeprefix("https://"))
    sock.close()
    assert head.startswith(b"HTTP/1.1 200 ")


def test_once_refuses_them_on_a_cassette_switched_to_that_holds_recordings(
    make_proxy: MakeProxy, own_ca_server: tuple[KeepAliveUpstream, Path]
) -> None:
    up, _ = own_ca_server
    proxy = make_proxy(forward=True, mode="record", cassette="full", upstream={"own": up.url})
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy.url + "/openai/v1/chat/completions", json=body).status_code == 200
    statuses = []
    for cassette in ("full", "empty"):
        put = {"cassette": cassette, "mode": "once"}
        assert httpx.put(proxy.url + "/__tapeproxy/cassette", json=put).status_code == 200
        sock, head = connect(proxy, up.url.removeprefix("https://"))
        sock.close()
        statuses.append(head.split(b" ")[1])
    assert statuses == [b"403", b"200"]


def test_no_key_material_on_disk_after_the_run(tmp_path: Path, fake: FakeUpstream) -> None:
    cassettes = tmp_path / "cassettes"
    keep = "import os, shutil; shutil.copy(os.environ['SSL_CERT_FILE'], 'bundle-copy.pem')"
    done = subprocess.run(
        [sys.executable, "-m", "tapeproxy", "run", "--mode", "record", "--cassettes",
         str(cassettes), "--upstream", f"openai={fake.url}", "--", sys.executable, "-c", keep],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"BEGIN CERTIFICATE" in (tmp_path / "bundle-copy.pem").read_bytes()
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or b"PRIVATE KEY" not in path.read_bytes(), path


def test_off_loopback_a_connect_needs_the_admin_token(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(forward=True, host="0.0.0.0", admin_token=TOKEN)
    proxy.url = "http://127.0.0.1:" + proxy.url.rsplit(":", 1)[1]
    sock, head = connect(proxy, "api.openai.com:443")
    sock.close()
    assert head.startswith(b"HTTP/1.1 407 ") and b"proxy-authenticate: Basic" in head
    basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
    sock, head = connect(proxy, "api.openai.com:443", f"Proxy-Authorization: Basic {basic}\r\n")
    sock.close()
    assert head.startswith(b"HTTP/1.1 200 ")


def test_connect_to_port_22_and_to_the_proxy_itself_are_refused(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(forward=True, mode="record")
    sock, head = connect(proxy, "example.com:22")
    sock.close()
    assert head.startswith(b"HTTP/1.1 403 ") and b"port 22 is not allowed" in head
    own = proxy.url.removeprefix("http://")
    port = int(own.rsplit(":", 1)[1])
    proxy.tapeproxy.forward.hosts.ports.add(port)  # type: ignore[union-attr]
    sock, head = connect(proxy, own)
    sock.close()
    assert head.startswith(b"HTTP/1.1 403 ") and b"the proxy itself" in head


def test_a_malformed_connect_gets_400_in_one_line(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(forward=True)
    sock, head = connect(proxy, "no-port-here")
    answer = head + sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 400 ")
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert body.count(b"\n") == 1 and b"malformed CONNECT target" in body


def test_a_stalled_handshake_is_closed(
    make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(connection, "HANDSHAKE_SECONDS", 0.3)
    proxy = make_proxy(forward=True)
    sock, head = connect(proxy, "api.openai.com:443")
    assert head.startswith(b"HTTP/1.1 200 ")
    sock.settimeout(10)
    assert sock.recv(4096) == b""  # closed by the proxy, not by the test's timeout
    sock.close()
    assert "did not finish within 0.3 s" in logged(caplog, "did not finish")


def test_a_client_leaving_mid_handshake_is_logged_with_a_reason(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(forward=True)
    sock, head = connect(proxy, "api.openai.com:443")
    assert head.startswith(b"HTTP/1.1 200 ")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # (a reset: its exception's text is empty)
    text = logged(caplog, "TLS handshake for api.openai.com failed")
    assert "TLS handshake for api.openai.com failed: ConnectionResetError" in text


def test_a_client_refusing_our_certificate_gets_one_clear_log_line(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(forward=True)
    sock, _ = connect(proxy, "api.openai.com:443")
    client = ssl.create_default_context()  # the system's roots: not the run's CA
    with pytest.raises(ssl.SSLCertVerificationError):
        client.wrap_socket(sock, server_hostname="api.openai.com")
    sock.close()
    ca_file = proxy.tapeproxy.forward.ca_file  # type: ignore[union-attr]
    logged(caplog, "refused tapeproxy's certificate")
    line = "a client refused tapeproxy's certificate for api.openai.com: trust the run's CA in "
    assert line + str(ca_file) in caplog.text


def test_the_reverse_routes_answer_on_the_same_port(make_proxy: MakeProxy, cassettes: Path) -> None:
    proxy = make_proxy(forward=True, mode="record")
    # serve --forward leaves the CA's certificate (and nothing else) for other containers
    pem = (cassettes / ".tapeproxy" / "ca.pem").read_bytes()
    assert pem.startswith(b"-----BEGIN CERTIFICATE") and b"PRIVATE" not in pem
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(proxy.url + "/openai/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    assert proxy.get("/__tapeproxy/health")


def test_cross_door_run_recording_replays_through_the_reverse_route(
    tmp_path: Path, fake: FakeUpstream, make_proxy: MakeProxy
) -> None:
    cassettes = tmp_path / "cassettes"
    recorded = tapeproxy_run(cassettes, "record", fake.url, *CURL)
    assert recorded.returncode == 0, recorded.stderr
    proxy = make_proxy(mode="replay", upstream={"openai": DEAD})
    answer = httpx.post(
        proxy.url + "/openai/v1/chat/completions",
        content=CURL[CURL.index("-d") + 1],
        headers={"content-type": "application/json", "authorization": "Bearer sk-other"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert answer.text == recorded.stdout


def test_cross_door_reverse_recording_replays_through_run(
    tmp_path: Path, fake: FakeUpstream, make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    answer = httpx.post(
        proxy.url + "/openai/v1/chat/completions",
        content=CURL[CURL.index("-d") + 1],
        headers={"content-type": "application/json", "authorization": "Bearer sk-other"},
        timeout=10,
    )
    assert answer.status_code == 200
    proxy.stop()
    replayed = tapeproxy_run(cassettes, "replay", DEAD, *CURL)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == answer.text


def test_plain_http_to_an_intercepted_host_in_absolute_form(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(forward=True, mode="record")
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(proxy=proxy.url, trust_env=False, timeout=10) as client:
        answer = client.post("http://api.openai.com/v1/chat/completions", json=body)
        assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
        assert fake.hits[-1].path == "/v1/chat/completions"
    # The answer closes the connection: the client's next request, for a host not
    # intercepted, comes on a new one, tunnelled there rather than sent to the first's upstream.
    port = int(proxy.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    statuses = []
    with KeepAliveUpstream() as other:
        other.answer(OK)
        for host in ("api.openai.com", other.url.removeprefix("http://")):
            connection.request("GET", f"http://{host}/v1/models", headers={"Host": host})
            raw = connection.getresponse()
            raw.read()
            statuses.append(raw.status)
    connection.close()
    assert statuses == [200, 200] and len(other.requests) == 1


def test_an_intercepted_host_of_the_users_is_an_upstream_named_by_it(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(forward=True, mode="replay", intercept=("*.example.com",))
    door = proxy.tapeproxy.forward
    assert door is not None and door.ca.covers("api.example.com")
    trust = ssl.create_default_context(cafile=str(door.ca_file))
    with httpx.Client(proxy=proxy.url, verify=trust, trust_env=False, timeout=10) as client:
        answer = client.post("https://api.example.com/v2/things", json={"a": 1})
    assert answer.status_code == 422  # decrypted, routed, and a miss in an empty cassette
    assert "POST api.example.com /v2/things" in answer.text


def test_a_sigterm_to_run_goes_to_the_command(tmp_path: Path) -> None:
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    args = [sys.executable, "-m", "tapeproxy", "run", "--cassettes", str(tmp_path), "--"]
    process = subprocess.Popen(
        [*args, sys.executable, "-c", child],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        process.terminate()
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 7
    assert err.splitlines()[-1] == "tapeproxy: replayed 0, recorded 0, misses 0"


def tls_through(proxy: ProxyServer, alpn: list[str]) -> ssl.SSLSocket:
    """A TLS connection to api.openai.com through `proxy`, offering `alpn`, trusting its CA."""
    sock, head = connect(proxy, "api.openai.com:443")
    assert head.startswith(b"HTTP/1.1 200 ")
    door = proxy.tapeproxy.forward
    assert door is not None
    context = ssl.create_default_context(cafile=str(door.ca_file))
    context.set_alpn_protocols(alpn)
    return context.wrap_socket(sock, server_hostname="api.openai.com")


def test_a_client_offering_http11_and_h2_is_decrypted_on_http11(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(forward=True, mode="record")
    with tls_through(proxy, ["h2", "http/1.1"]) as tls:
        assert tls.selected_alpn_protocol() == "http/1.1"
        tls.sendall(b"GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 200 ")


def test_an_http2_only_client_is_never_decrypted_and_refused_in_replay(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(forward=True, mode="replay")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_through(proxy, ["h2"]).recv(1)
    door = proxy.tapeproxy.forward
    assert door is not None and door.refused == {"api.openai.com:443 (HTTP/2 only)"}


def test_allow_host_lets_a_replay_tunnel_one_host(
    tmp_path: Path, own_ca_server: tuple[KeepAliveUpstream, Path]
) -> None:
    up, trust = own_ca_server
    curl = ("curl", "-sS", "--noproxy", "", "--cacert", str(trust), up.url + "/x")
    extra = ("--upstream", f"own={up.url}", "--allow-host", "127.0.0.1")
    done = tapeproxy_run(tmp_path / "cassettes", "replay", up.url, *curl, extra=extra)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"n": "ok"}
    assert "tunnelled 127.0.0.1:" in done.stderr.splitlines()[-1]


def test_serve_forward_from_the_command_line(tmp_path: Path, fake: FakeUpstream) -> None:
    cassettes = tmp_path / "cassettes"
    args = ["--forward", "--mode", "record", "--cassettes", str(cassettes)]
    server = Serve([*args, "--upstream", f"openai={fake.url}"], tmp_path)
    try:
        ca_file = cassettes / ".tapeproxy" / "ca.pem"
        curl = ["curl", "-sS", "--fail-with-body", "--proxy", server.url, "--cacert", str(ca_file)]
        done = subprocess.run([*curl, *CURL[3:]], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["object"] == "chat.completion"
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert len([p for p in cassettes.rglob("*.json")]) == 1


def own_address() -> str | None:
    """This machine's address on its default route (no packet sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_tunnel_back_to_the_proxy_by_another_name_is_refused(make_proxy: MakeProxy) -> None:
    address = own_address()
    if address is None:
        pytest.skip("no address but loopback on this machine")
    proxy = make_proxy(forward=True, host="0.0.0.0", admin_token=TOKEN, mode="record")
    port = int(proxy.url.rsplit(":", 1)[1])
    proxy.url = f"http://127.0.0.1:{port}"
    proxy.tapeproxy.forward.hosts.ports.add(port)  # type: ignore[union-attr]
    basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
    sock, head = connect(proxy, f"{address}:{port}", f"Proxy-Authorization: Basic {basic}\r\n")
    sock.close()
    assert head.startswith(b"HTTP/1.1 502 ") and b"this proxy" in head


def test_off_loopback_without_an_admin_token_every_connect_is_407(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(forward=True, host="0.0.0.0")
    assert "answers every forward request 407" in caplog.text
    proxy.url = "http://127.0.0.1:" + proxy.url.rsplit(":", 1)[1]
    sock, head = connect(proxy, "api.openai.com:443", "Proxy-Authorization: Bearer x\r\n")
    sock.close()
    assert head.startswith(b"HTTP/1.1 407 ")
