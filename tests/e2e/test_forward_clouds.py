"""The clouds' SDKs with no endpoint set, under `tapeproxy run`: boto3's `bedrock-runtime`
keeps its own SigV4 signature for the real host (the fake checks it for that name), and
google-genai on Vertex with a service-account JSON mints its token through the forward proxy
(live to a fake token endpoint while recording, answered synthetic in a replay). Each
records, then replays with the fakes stopped and dummy credentials, to identical output; no
credential reaches a cassette or the log."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import boto3
import certifi
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tapeproxy.forward.mints import SYNTHETIC_TOKEN
from tests.conftest import MakeProxy
from tests.e2e.test_guide_recipes import recipe
from tests.fakes.sigv4 import SigV4Check
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import files_under
from tests.support.aws import CLIENT, DUMMY, MODEL

DEAD = "http://127.0.0.1:9"  # nothing listens: a replay that went upstream would fail
REAL_HOST = "bedrock-runtime.us-east-1.amazonaws.com"
ISSUED = "ya29.fake-SECRET-token-issued-by-the-fake"
HELLO = [{"role": "user", "content": [{"text": "hello bedrock"}]}]


def tapeproxy_run(
    cassettes: Path, mode: str, upstreams: dict[str, str], env: dict[str, str], *cmd: str
) -> subprocess.CompletedProcess[str]:
    """`tapeproxy run` in a subprocess (logging at info, so the log is scanned too)."""
    args = [sys.executable, "-m", "tapeproxy", "run", "--mode", mode, "--log-level", "info"]
    args += ["--cassettes", str(cassettes)]
    for name, url in upstreams.items():
        args += ["--upstream", f"{name}={url}"]
    base = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    base = {k: v for k, v in base.items() if not k.startswith(("AWS_", "GOOGLE_"))}
    done = subprocess.run(
        [*args, "--", *cmd],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return done


def assert_nowhere(places: list[bytes], *secrets: str) -> None:
    for data in places:
        for secret in secrets:
            assert secret.encode() not in data


BOTO3 = f"""
import json
import boto3
runtime = boto3.client("bedrock-runtime", region_name="us-east-1")  # no endpoint_url
signed = []
runtime.meta.events.register(
    "before-send.bedrock-runtime.*",
    lambda request, **_: signed.append(request.headers["Authorization"].decode()),
)
hello = [{{"role": "user", "content": [{{"text": "hello bedrock"}}]}}]
invoke = json.dumps({{
    "anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
    "messages": [{{"role": "user", "content": "hello invoke"}}],
}})
converse = runtime.converse(modelId={MODEL!r}, messages=hello)
converse.pop("ResponseMetadata")
streamed = list(runtime.converse_stream(modelId={MODEL!r}, messages=hello)["stream"])
invoked = json.loads(runtime.invoke_model(modelId={MODEL!r}, body=invoke)["body"].read())
chunks = runtime.invoke_model_with_response_stream(modelId={MODEL!r}, body=invoke)["body"]
events = [json.loads(e["chunk"]["bytes"]) for e in chunks]
print(json.dumps([converse, streamed, invoked, events], sort_keys=True))
with open("signatures.txt", "a") as out:
    out.write("\\n".join(s.rsplit("=", 1)[1] for s in signed) + "\\n")
"""


def aws(keys: tuple[str, str, str | None]) -> dict[str, str]:
    env = {"AWS_ACCESS_KEY_ID": keys[0], "AWS_SECRET_ACCESS_KEY": keys[1]}
    env |= {"AWS_SESSION_TOKEN": keys[2]} if keys[2] else {}
    nowhere = "/nonexistent/aws"  # no config or credentials file of the machine's
    env |= {"AWS_CONFIG_FILE": nowhere, "AWS_SHARED_CREDENTIALS_FILE": nowhere}
    env |= {"AWS_CA_BUNDLE": certifi.where()}  # the user's own bundle: `run` sets its own
    return env | {"AWS_EC2_METADATA_DISABLED": "true"}


def test_boto3_under_run_keeps_its_own_signature_and_replays_offline(
    tmp_path: Path, fake: FakeUpstream, monkeypatch: Any
) -> None:
    check = SigV4Check(*CLIENT)
    check.host = REAL_HOST  # the client signed for the real host: AWS checks that name
    fake.sigv4 = check
    monkeypatch.chdir(tmp_path)
    cassettes = tmp_path / "cassettes"
    cmd = (sys.executable, "-c", BOTO3)
    recorded = tapeproxy_run(cassettes, "record", {"bedrock": fake.url}, aws(CLIENT), *cmd)
    assert recorded.stderr.splitlines()[-1].startswith("tapeproxy: replayed 0, recorded 4")
    assert len(fake.hits) == 4
    assert all(hit.headers["host"] == REAL_HOST for hit in fake.hits)
    fake.stop()
    replayed = tapeproxy_run(cassettes, "replay", {"bedrock": DEAD}, aws(DUMMY), *cmd)
    assert replayed.stderr.splitlines()[-1] == "tapeproxy: replayed 4, recorded 0, misses 0"
    assert replayed.stdout == recorded.stdout
    converse = json.loads(recorded.stdout)[0]
    assert converse["output"]["message"]["content"][0]["text"] == "echo: hello bedrock"
    signatures = (tmp_path / "signatures.txt").read_text().split()
    assert len(signatures) == 8
    places = [*files_under(cassettes).values(), recorded.stderr.encode()]
    assert_nowhere(places, *CLIENT[:2], CLIENT[2] or "", *signatures)


GENAI = """
import json, sys
from google import genai
from google.oauth2 import service_account
scopes = ["https://www.googleapis.com/auth/cloud-platform"]
credentials = service_account.Credentials.from_service_account_file(sys.argv[1], scopes=scopes)
client = genai.Client(
    vertexai=True, project="tape-project-123", location="us-central1", credentials=credentials
)
answer = client.models.generate_content(model="gemini-test", contents="hello cloud")
chunks = client.models.generate_content_stream(model="gemini-test", contents="hello cloud")
print(json.dumps([answer.text, [c.text for c in chunks]]))
"""


def service_account(path: Path) -> rsa.RSAPrivateKey:
    """A service-account JSON with a fresh RSA key, minting at Google's real token URI."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    account = {
        "type": "service_account",
        "project_id": "tape-project-123",
        "private_key_id": "0123456789abcdef",
        "private_key": pem.decode(),
        "client_email": "tape@tape-project-123.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    path.write_text(json.dumps(account))
    return key


def verify_assertion(assertion: str, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    """The JWT google-auth signed, checked with the account's public key (RS256)."""
    head, claims, signature = assertion.split(".")
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    signed = f"{head}.{claims}".encode()
    key.public_key().verify(raw, signed, padding.PKCS1v15(), hashes.SHA256())
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(claims + "=="))
    return decoded


def test_google_genai_with_a_service_account_mints_through_the_proxy(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    token = {"access_token": ISSUED, "expires_in": 3599, "token_type": "Bearer"}
    fake.script("/token", Reply(body=token))
    cassettes, account = tmp_path / "cassettes", tmp_path / "account.json"
    key = service_account(account)
    upstreams = {"vertex": fake.url, "google-oauth": fake.url}  # the fake mints while recording
    cmd = (sys.executable, "-c", GENAI, str(account))
    recorded = tapeproxy_run(cassettes, "record", upstreams, {}, *cmd)
    assert recorded.stderr.splitlines()[-1].startswith("tapeproxy: replayed 0, recorded 2")
    mint, *calls = fake.hits
    form = parse_qs(mint.body.decode())
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assert (
        verify_assertion(form["assertion"][0], key)["aud"] == "https://oauth2.googleapis.com/token"
    )
    assert [hit.headers["authorization"] for hit in calls] == [f"Bearer {ISSUED}"] * 2
    fake.stop()
    service_account(account)  # another key: the replay's credentials are not the recording's
    replayed = tapeproxy_run(cassettes, "replay", {"vertex": DEAD}, {}, *cmd)
    assert replayed.stderr.splitlines()[-1] == "tapeproxy: replayed 2, recorded 0, misses 0"
    assert replayed.stdout == recorded.stdout
    assert json.loads(recorded.stdout)[0] == "echo: hello cloud"
    places = [*files_under(cassettes).values(), recorded.stderr.encode(), replayed.stderr.encode()]
    assert_nowhere(places, ISSUED, form["assertion"][0], SYNTHETIC_TOKEN)
    assert_nowhere(list(files_under(cassettes).values()), "grant_type", "/token")


def test_the_guides_run_recipes_record_then_replay_offline(
    tmp_path: Path, fake: FakeUpstream, monkeypatch: Any
) -> None:
    """docs/clouds.md: boto3 with no endpoint_url and google-genai with a service account in
    GOOGLE_APPLICATION_CREDENTIALS, each under `tapeproxy run`, as the page shows them."""
    check = SigV4Check(*CLIENT)
    check.host = REAL_HOST
    fake.sigv4 = check
    fake.script("/token", Reply(body={"access_token": ISSUED, "expires_in": 3599}))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bedrock.py").write_text(recipe("bedrock-run"))
    (tmp_path / "vertex.py").write_text(recipe("vertex-run"))
    service_account(tmp_path / "sa.json")
    google = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "sa.json")}
    upstreams = {"bedrock": fake.url, "vertex": fake.url, "google-oauth": fake.url}
    said = []
    for mode, keys in (("record", CLIENT), ("replay", DUMMY)):
        if mode == "replay":
            fake.stop()
            service_account(tmp_path / "sa.json")  # a key made on the spot
            upstreams = dict.fromkeys(upstreams, DEAD)
        for script in ("bedrock.py", "vertex.py"):
            done = tapeproxy_run(
                tmp_path / "cassettes", mode, upstreams, aws(keys) | google, sys.executable, script
            )
            said.append(done.stdout)
    assert said == ["echo: What is the capital of France?\n"] * 4


def test_boto3_in_process_through_serve_forward_and_https_proxy(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path, monkeypatch: Any
) -> None:
    """`serve --forward` with HTTPS_PROXY set by hand, boto3 in the test's own process."""
    check = SigV4Check(*CLIENT)
    check.host = REAL_HOST
    fake.sigv4 = check
    ca = tmp_path / "ca.pem"
    for name, value in aws(CLIENT).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))  # botocore's own, over REQUESTS_CA_BUNDLE
    said = []
    for mode in ("record", "replay"):
        proxy = make_proxy(mode=mode, forward=True, ca_cert=ca)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        runtime = boto3.client("bedrock-runtime", region_name="us-east-1")
        answer = runtime.converse(modelId=MODEL, messages=HELLO)
        said.append(answer["output"]["message"]["content"][0]["text"])
        proxy.stop()
        fake.stop()
    assert said == ["echo: hello bedrock"] * 2
