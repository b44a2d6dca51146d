"""SigV4 on the way up: a request a client signed for tapeproxy's own host (the reverse route)
is re-signed for the real host with botocore's signer and tapeproxy's own AWS credentials
(`--resign aws`), or refused in one line; one signed for the real host (the forward proxy)
goes with its signature untouched and the Host it signed, wherever `--upstream` sends it.
Credentials are read only here, when a request goes live, and kept nowhere."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from tapeproxy.errors import ConfigError, NeedsResign, UpstreamError
from tapeproxy.problems import one_line
from tapeproxy.upstream.protocol import (
    Outbound,
    SocketUpstream,
    Upstream,
    UpstreamResponse,
    UpstreamSocket,
)

SIGV4 = b"AWS4-HMAC-SHA256"
SERVICE = "bedrock"  # when the client's signature names none
# The client's credential scope (`Credential=KEY/DATE/REGION/SERVICE/aws4_request`): the service
# its SDK signs for is the one the real host checks (`bedrock`, `sagemaker`, ...).
_SCOPE = re.compile(rb"Credential=[^/,]+/\d{8}/[a-z0-9-]+/([a-z0-9-]+)/aws4_request")
# The headers a SigV4 signature is made of: the client's are dropped before signing anew.
SIGNATURE_HEADERS = frozenset(
    {b"authorization", b"x-amz-date", b"x-amz-security-token", b"x-amz-content-sha256"}
)
# A Host only a client that signed for AWS itself sends (through the forward proxy).
_AWS_HOST = re.compile(r"^[a-z0-9.-]+\.amazonaws\.com(?::443)?$", re.IGNORECASE)
# An AWS host's region: `bedrock-runtime.REGION.amazonaws.com`, `runtime.sagemaker.REGION...`.
_REGION = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d+)(?:\.vpce)?\.amazonaws\.com(?:\.cn)?$")

NO_RESIGN = (
    "this request is SigV4-signed for tapeproxy's own address, so the real host would refuse "
    "it: record with --resign aws (tapeproxy re-signs with its own AWS credentials), or "
    "through the forward proxy (tapeproxy run), which keeps the client's signature"
)


def region_of(host: str) -> str:
    """The region to sign for: the host's (`bedrock-runtime.REGION.amazonaws.com`), else
    AWS_REGION or AWS_DEFAULT_REGION; ConfigError naming them when there is none."""
    found = _REGION.search(host)
    region = found.group(1) if found else None
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise ConfigError(f"--resign aws: no region in {host!r}; set AWS_REGION")
    return region


class Signing:
    """An `Upstream` that sees to SigV4-signed requests before `inner` sends them."""

    def __init__(self, inner: Upstream, resign: str | None) -> None:
        self.inner = inner
        self.resign = resign
        self._session: Any = None  # botocore's session: its credential chain, made once

    async def open(self, request: Outbound) -> UpstreamResponse:
        auth = next((v for k, v in request.headers if k.lower() == b"authorization"), b"")
        host = urlsplit(request.url).netloc
        signed = request.host.decode("latin-1")
        if not auth.startswith(SIGV4) or signed == host:
            return await self.inner.open(request)
        if _AWS_HOST.match(signed):  # signed for the real host: the Host the signature covers
            headers = [*request.headers, (b"host", request.host)]
            return await self.inner.open(replace(request, headers=headers))
        if self.resign != "aws":
            raise NeedsResign(NO_RESIGN)
        # The credential chain may read files or ask the instance metadata service.
        return await self.inner.open(await asyncio.to_thread(self._signed, request))

    async def connect(
        self, request: Outbound, protocols: Sequence[str], max_frame: int
    ) -> UpstreamSocket:
        """A WebSocket session, as it came (no provider signs an upgrade with SigV4)."""
        if not isinstance(self.inner, SocketUpstream):
            raise UpstreamError("this upstream client has no WebSocket support")
        return await self.inner.connect(request, protocols, max_frame)

    def _signed(self, request: Outbound) -> Outbound:
        credentials = self._credentials()  # first: without botocore, says which extra
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        # (here, not at the top: that module imports aiohttp, which a replay never needs)
        from tapeproxy.upstream.request import header_text

        kept = [(k, v) for k, v in request.headers if k.lower() not in SIGNATURE_HEADERS]
        aws = AWSRequest(method=request.method, url=request.url, data=request.body)
        for name, value in kept:  # each line (a name twice: signed as `a,b`, as AWS reads it)
            # Its text as aiohttp sends it (UTF-8 bytes as they came): AWS hashes those bytes.
            aws.headers[name.decode("latin-1")] = header_text(value)
        region = region_of(urlsplit(request.url).hostname or "")
        auth = next((v for k, v in request.headers if k.lower() == b"authorization"), b"")
        scope = _SCOPE.search(auth)
        service = scope.group(1).decode("ascii") if scope else SERVICE
        SigV4Auth(credentials, service, region).add_auth(aws)
        fresh = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in aws.headers.items()
            if name.lower().encode("latin-1") in SIGNATURE_HEADERS
        ]
        headers = [*kept, *fresh]
        return Outbound(request.upstream, request.method, request.url, headers, request.body)

    def _credentials(self) -> Any:
        """The standard AWS chain of tapeproxy's own process (environment, profile, SSO,
        container, instance), frozen for this one request; ConfigError when it finds none."""
        try:
            import botocore.session
            from botocore.exceptions import BotoCoreError
        except ImportError as exc:
            raise ConfigError("--resign aws needs botocore: pip install 'tapeproxy[aws]'") from exc
        # botocore logs where it found the credentials, and its signer what it signs (the
        # session token too): silenced at each signature, in case a test of the pytest
        # plugin's process turned botocore's debug lines on since the last one.
        logging.getLogger("botocore").setLevel(logging.WARNING)
        try:  # a profile that is not there, an SSO login expired, an endpoint that is down
            if self._session is None:
                self._session = botocore.session.Session()
            found = self._session.get_credentials()
            frozen = None if found is None else found.get_frozen_credentials()
        except BotoCoreError as exc:
            raise ConfigError(f"--resign aws: {one_line(exc)}") from exc
        if frozen is None:
            raise ConfigError("--resign aws: no AWS credentials in tapeproxy's environment")
        return frozen
