"""Which names hold a credential: HTTP headers, query parameters, and body and form fields.
Each kind has its own rule, from broad (any header with `auth` in its name) to narrow (a body
field named exactly `token`): the narrower, the more the name is ordinary request content."""

from __future__ import annotations

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "ocp-apim-subscription-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "x-amz-security-token",
    }
)
# Compared with `-` and `_` taken out and lowercased: `api_token`, `apiToken` and
# `api-token` are one name.
SECRET_QUERY = frozenset(
    {
        "key",
        "apikey",
        "xapikey",
        "xgoogapikey",
        "token",
        "apitoken",
        "accesstoken",
        "idtoken",
        "refreshtoken",
        "authtoken",
        "sessiontoken",
        "securitytoken",
        "xamzsecuritytoken",
        "bearer",
        "auth",
        "sig",
        "signature",
        "secret",
        "clientsecret",
        "password",
        "pass",
        "pwd",
        "accesskey",
        "authkey",
        "subscriptionkey",
        "privatetoken",
        "appid",
        "appkey",
        "secretkey",
        "privatekey",
        "sessionkey",
        "code",  # an OAuth authorization code
    }
)
# Any header name holding one of these is treated as a credential too: unknown upstreams
# invent names, and a header that is not a key header is never stored anyway.
_SECRET_WORDS = (
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "api_key",
    "cookie",
    "session",
    "signature",
    "credential",
)
# Query names are matched more narrowly: `page_token`, `nextPageToken` or `author` are not
# credentials, and dropping them would give different pages one key.
_SECRET_QUERY_WORDS = ("secret", "password", "passwd", "signature", "credential", "apikey")
# Body field names, narrower still: a body is the request itself, and `key`, `max_tokens`,
# `auth` or `page_token` are ordinary field names there. Exact names, then name endings.
# `authorization` and `token` are exact: MCP servers in Anthropic and OpenAI requests carry
# their credential as `authorization_token`, `authorization` or a bare `token`.
_SECRET_FIELDS = frozenset(
    {
        "idtoken",
        "authtoken",
        "sessiontoken",
        "securitytoken",
        "apitoken",
        "passwd",
        "clientassertion",
        "authorization",
        "token",
        "bearer",
        "credential",
        "credentials",
    }
)
_SECRET_FIELD_ENDINGS = (
    "apikey",
    "apisecret",
    "accesstoken",
    "refreshtoken",
    "clientsecret",
    "secret",
    "secretkey",
    "secretaccesskey",
    "privatekey",
    "password",
    "authorizationtoken",
    "bottoken",
    "oauthtoken",
    "bearertoken",
)


def _squash(name: str) -> str:
    """`API_Token`, `apiToken` and `api-token` -> `apitoken`."""
    return name.lower().replace("-", "").replace("_", "")


def is_secret_header(name: str) -> bool:
    """A header that holds a credential: a known name, or any name with a secret word in it."""
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def is_secret_query(name: str) -> bool:
    """A query parameter that holds a credential (`key`, `access_token`, `X-Amz-Signature`)."""
    squashed = _squash(name)
    return squashed in SECRET_QUERY or any(word in squashed for word in _SECRET_QUERY_WORDS)


def is_secret_field(name: str) -> bool:
    """A JSON or form body field that holds a credential (`api_key`, `client_secret`)."""
    squashed = _squash(name)
    return squashed in _SECRET_FIELDS or squashed.endswith(_SECRET_FIELD_ENDINGS)


def is_secret_form_field(name: str) -> bool:
    """A form or multipart field holding a credential: a credential-named body field, or
    exactly a key-like query name (`key`, `token`, `api_key`). Not the query rule's substring
    words: `secret_santa` is a field, not a secret."""
    return is_secret_field(name) or _squash(name) in SECRET_QUERY
