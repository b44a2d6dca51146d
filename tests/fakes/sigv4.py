"""SigV4 checked as AWS checks it: the signature recomputed with botocore for the fake's own
host, the request's signed headers and body, and the test's known credentials."""

from __future__ import annotations

import re
from collections.abc import Mapping

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
    r"Signature=(?P<sig>[0-9a-f]+)$"
)


class SigV4Check:
    """Whether a request carries a valid signature by `credentials` for `host`, or (a Bedrock
    API key, which covers no host) `Authorization: Bearer api_key`."""

    def __init__(
        self, access_key: str, secret: str, token: str | None = None, api_key: str = ""
    ) -> None:
        self.credentials = Credentials(access_key, secret, token)
        self.api_key = api_key
        self.host = ""  # set once the fake listens
        self.service = "bedrock"  # the service AWS checks the credential scope names

    def problem(
        self, method: str, path_qs: str, headers: Mapping[str, str], body: bytes
    ) -> str | None:
        """Why AWS would refuse the request, or None."""
        if self.api_key and headers.get("authorization") == f"Bearer {self.api_key}":
            return None
        found = _AUTH.match(headers.get("authorization", ""))
        if found is None:
            return "Missing Authentication Token"
        if found["key"] != self.credentials.access_key:
            return "The security token included in the request is invalid."
        if self.credentials.token and headers.get("x-amz-security-token") != self.credentials.token:
            return "The security token included in the request is invalid."
        if found["service"] != self.service:
            return f"Credential should be scoped to correct service: '{self.service}'."
        signed = found["signed"].split(";")
        if "host" not in signed:
            return "host is not signed"
        # AWS signs over the Host that came: one that is not this fake's name is refused as
        # a mismatch (a signature right for the real host, sent with tapeproxy's, included).
        came = headers.get("host", self.host)
        kept = {name: headers[name] for name in signed if name in headers and name != "host"}
        request = AWSRequest(method=method, url=f"http://{came}{path_qs}", data=body, headers=kept)
        request.context["timestamp"] = headers.get("x-amz-date", "")
        auth = SigV4Auth(self.credentials, found["service"], found["region"])
        canonical = auth.canonical_request(request)
        to_sign = auth.string_to_sign(request, canonical)
        if came != self.host or auth.signature(to_sign, request) != found["sig"]:
            # As AWS answers it: the canonical string holds each signed header's value, the
            # session token's too (litellm#14763 shows Bedrock's).
            return (
                "The request signature we calculated does not match the signature you "
                "provided. Check your AWS Secret Access Key and signing method. Consult the "
                "service documentation for details.\n\nThe Canonical String for this request "
                f"should have been\n'{canonical}'\n\nThe String-to-Sign should have been\n"
                f"'{to_sign}'\n"
            )
        return None
