"""Credential mints under `tapeproxy run`, raw and through azure-identity: answered by
tapeproxy in a replay (a synthetic token, Entra's OpenID discovery document), sent live and
never recorded while recording; and no route of the reverse proxy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from tapeproxy.forward.mints import SYNTHETIC_TOKEN
from tests.conftest import MakeProxy
from tests.e2e.test_forward_clouds import DEAD, ISSUED, assert_nowhere, tapeproxy_run
from tests.e2e.test_guide_recipes import recipe
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import files_under

MINT_BOTH = """
import json, requests
tenant = "https://login.microsoftonline.com/0000-tenant-id/oauth2/v2.0/token"
entra = requests.post(tenant, data={
    "grant_type": "client_credentials", "client_id": "app", "client_secret": "entra-SECRET-42",
    "scope": "https://cognitiveservices.azure.com/.default",
})
google = requests.post("https://oauth2.googleapis.com/token", data={"assertion": "a.b.c"})
other = requests.get("https://oauth2.googleapis.com/tokeninfo")
print(json.dumps([entra.status_code, entra.json(), google.json(), other.status_code]))
"""


def test_entra_and_google_mints_are_synthetic_in_a_replay_and_live_unrecorded_otherwise(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    cassettes, cmd = tmp_path / "cassettes", (sys.executable, "-c", MINT_BOTH)
    replayed = tapeproxy_run(cassettes, "replay", {}, {}, *cmd)
    status, entra, google, other = json.loads(replayed.stdout)
    assert status == 200 and entra == google
    assert entra["access_token"] == SYNTHETIC_TOKEN and entra["expires_in"] >= 3600
    assert other == 403, "a replay answers a mint's token endpoint only"
    fake.script("/0000-tenant-id/oauth2/v2.0/token", Reply(body={"access_token": ISSUED}))
    fake.script("/token", Reply(body={"access_token": ISSUED}))
    upstreams = {"entra": fake.url, "google-oauth": fake.url}
    recorded = tapeproxy_run(cassettes, "record", upstreams, {}, *cmd)
    status, entra, google, other = json.loads(recorded.stdout)
    assert entra == google == {"access_token": ISSUED}
    assert [hit.path for hit in fake.hits] == [
        "/0000-tenant-id/oauth2/v2.0/token",
        "/token",
        "/tokeninfo",
    ]
    assert "entra-SECRET-42" in fake.hits[0].body.decode()
    assert recorded.stderr.splitlines()[-1].startswith("tapeproxy: replayed 0, recorded 0")
    assert not files_under(cassettes)
    assert_nowhere([recorded.stderr.encode()], "entra-SECRET-42", ISSUED)


def test_a_mints_upstream_is_no_route_of_the_reverse_proxy(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record", upstream={"google-oauth": fake.url})
    answer = httpx.post(f"{proxy.url}/google-oauth/token", data={"assertion": "a.b.c"})
    assert answer.status_code == 404 and "google-oauth" in answer.text
    assert not fake.hits and not files_under(cassettes)


TENANT = "/0000-tenant-id"


def test_azure_openai_with_an_entra_client_secret_replays_offline(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """azure-identity reads the tenant's OpenID document, then mints: both live to the fake
    while recording, both answered by tapeproxy in a replay."""
    login = f"https://login.microsoftonline.com{TENANT}"
    document = {
        "issuer": f"{login}/v2.0",
        "authorization_endpoint": f"{login}/oauth2/v2.0/authorize",
        "token_endpoint": f"{login}/oauth2/v2.0/token",
    }
    fake.script(f"{TENANT}/v2.0/.well-known/openid-configuration", Reply(body=document))
    token = {"access_token": ISSUED, "expires_in": 3599, "token_type": "Bearer"}
    fake.script(f"{TENANT}/oauth2/v2.0/token", Reply(body=token))
    cassettes, cmd = tmp_path / "cassettes", (sys.executable, "-c", recipe("azure-entra-run"))
    recorded = tapeproxy_run(cassettes, "record", {"azure": fake.url, "entra": fake.url}, {}, *cmd)
    assert recorded.stdout == "echo: What is the capital of France?\n"
    assert [hit.path for hit in fake.hits] == [
        f"{TENANT}/v2.0/.well-known/openid-configuration",
        f"{TENANT}/oauth2/v2.0/token",
        "/openai/deployments/gpt-4o-mini/chat/completions",
    ]
    assert fake.hits[-1].headers["authorization"] == f"Bearer {ISSUED}"
    fake.stop()
    replayed = tapeproxy_run(cassettes, "replay", {"azure": DEAD}, {}, *cmd)
    assert replayed.stdout == recorded.stdout
    assert replayed.stderr.splitlines()[-1] == "tapeproxy: replayed 1, recorded 0, misses 0"
    places = [*files_under(cassettes).values(), recorded.stderr.encode(), replayed.stderr.encode()]
    assert_nowhere(places, ISSUED, "my-client-secret", SYNTHETIC_TOKEN)
