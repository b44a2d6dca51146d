"""What `--upstream NAME=URL` may hold (pure): a name that can head a route, an http(s) URL the
client's path and query are added to. One line of error each, never quoting a password."""

from __future__ import annotations

import re

from tapeproxy.redaction.secrets import masked_userinfo

UPSTREAM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
RESERVED_NAMES = frozenset({"v1", "__tapeproxy"})


def check_upstreams(value: dict[str, str]) -> dict[str, str]:
    """`value` with each URL's trailing slash dropped; ValueError for a bad name or URL."""
    for name, url in value.items():
        if not UPSTREAM_NAME.match(name) or name in RESERVED_NAMES:
            shown = masked_userinfo(name)  # (`https://user:pass@host/a=b` splits at =)
            raise ValueError(f"upstream name {shown!r}: use lowercase letters, digits, - or _")
        shown = f"upstream {name}={masked_userinfo(url)!r}"  # never its password
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"{shown} needs an http:// or https:// URL")
        if re.search(r"[\s#]", url):  # each would go on the request line as it is
            raise ValueError(f"{shown}: a URL holds no space and no #fragment")
        if "?" in url:  # the client's path would go after the query
            raise ValueError(
                f"{shown}: no ?query in an upstream URL (the client's path and query are "
                "added to it)"
            )
    return {name: url.rstrip("/") for name, url in value.items()}
