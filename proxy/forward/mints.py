"""The credential mints the forward proxy knows (Google's and Microsoft Entra's token
endpoints) and the synthetic token it answers them with (pure; tapeproxy.forward.minting
answers them)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

SYNTHETIC_TOKEN = "tapeproxy-synthetic-token"
LIFETIME = 3600  # seconds; each replay mints anew, so the SDK never sees it expire


@dataclass(frozen=True)
class Mint:
    """A token endpoint: the upstream name `--upstream NAME=URL` may point elsewhere, its
    real host (intercepted), its token path, and the provider its tokens are for (when that
    one runs live in a replay, `--live`, the mint goes live too)."""

    name: str
    host: str
    path: re.Pattern[str]
    serves: str
    # Its OpenID discovery document, which a client (MSAL) reads before it mints: the
    # tenant in the path, answered synthetic too.
    discovery: re.Pattern[str] | None = None


MINTS: Mapping[str, Mint] = {
    m.name: m
    for m in (
        Mint("google-oauth", "oauth2.googleapis.com", re.compile(r"^/token$"), "vertex"),
        Mint(
            "entra",
            "login.microsoftonline.com",
            re.compile(r"^/[^/]+/oauth2/v2\.0/token$"),
            "azure",
            re.compile(r"^/(?P<tenant>[^/]+)/v2\.0/\.well-known/openid-configuration$"),
        ),
    )
}


def not_mints(upstreams: Mapping[str, str]) -> dict[str, str]:
    """`--upstream`s less the mints' own: a mint is no upstream of the engine's, so no route
    (the reverse one included) can record it."""
    return {name: url for name, url in upstreams.items() if name not in MINTS}


def synthetic() -> bytes:
    """A token answer in the shape both Google and Entra give (OAuth 2.0, RFC 6749 5.1)."""
    token = {
        "access_token": SYNTHETIC_TOKEN,
        "token_type": "Bearer",
        "expires_in": LIFETIME,
        "ext_expires_in": LIFETIME,
    }
    return json.dumps(token).encode()


def discovered(mint: Mint, path: str) -> bytes | None:
    """A synthetic OpenID discovery document for `path`, if it is the mint's: its endpoints
    on the mint's real host, so the token request that follows comes back through the proxy."""
    found = mint.discovery.match(path) if mint.discovery is not None else None
    if found is None:
        return None
    base = f"https://{mint.host}/{found['tenant']}"
    document = {
        "issuer": f"{base}/v2.0",
        "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
        "token_endpoint": f"{base}/oauth2/v2.0/token",
        "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
        "jwks_uri": f"{base}/discovery/v2.0/keys",
    }
    return json.dumps(document).encode()
