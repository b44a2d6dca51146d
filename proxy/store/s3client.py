"""The S3 store's client: `s3://BUCKET/PREFIX` and the standard AWS environment variables made
into an obstore client (obstore signs every request), and its errors said in one line."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError
from obstore.store import S3Store as Client

from tapeproxy.errors import ConfigError

# Seconds. A store that does not answer must fail a start in seconds, not after obstore's
# default ten retries with up to 15 s between them.
CONNECT_TIMEOUT = 5
REQUEST_TIMEOUT = 60
RETRIES = 2
RETRY_WITHIN = 10
# What obstore raises: a missing object (its own class, or the builtin one), a conditional
# put that found an object there, and any failure (its errors, and OSError's).
MISSING = (NotFoundError, FileNotFoundError)
TAKEN = (AlreadyExistsError, FileExistsError)
FAILED = (BaseError, OSError)
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z]+)</Code>")


def split_bucket(rest: str) -> tuple[str, str]:
    """`BUCKET/PREFIX` (what follows `s3://`) -> (bucket, prefix without its slashes)."""
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(
            f"s3://{rest} names no bucket: give --cassettes s3://BUCKET or s3://BUCKET/PREFIX"
        )
    return bucket, prefix.strip("/")


def connect(bucket: str, prefix: str) -> Client:
    """An obstore client of `bucket` under `prefix`, configured as every AWS tool is: by
    AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (read by obstore).
    Plain http is allowed only when the endpoint says http:// (a local SeaweedFS or MinIO)."""
    for variable in ENDPOINT_VARIABLES:
        check_endpoint(variable, os.environ.get(variable, ""))
    endpoint = next((os.environ[v] for v in ENDPOINT_VARIABLES if os.environ.get(v)), "")
    retry = timedelta(seconds=RETRY_WITHIN)
    try:
        return Client(
            bucket,
            prefix=prefix or None,
            client_options={
                "allow_http": endpoint.startswith("http://"),
                "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT),
                "timeout": timedelta(seconds=REQUEST_TIMEOUT),
            },
            retry_config={"max_retries": RETRIES, "retry_timeout": retry},
        )
    except BaseError as exc:  # a setting obstore refuses: a secret key without its key id
        where = f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
        raise ConfigError(
            f"cannot open the cassette library {where}: {why(exc)}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY together, or neither"
        ) from exc


# What an endpoint URL may hold; obstore panics (a Rust backtrace) on a URL it cannot parse.
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")


def check_endpoint(variable: str, value: str) -> None:
    """A ConfigError in one line, naming the variable but not its value (a URL may carry a
    password), unless `value` is empty or an http(s) URL with a host."""
    if not value:
        return
    try:
        parts = urlsplit(value)
        good = (
            _URL_CHARACTERS.fullmatch(value) is not None
            and parts.scheme in ("http", "https")
            and bool(parts.hostname)
        )
        parts.port  # noqa: B018 - raises ValueError when the port is no port
    except ValueError:
        good = False
    if not good:
        raise ConfigError(
            f"{variable} is not an endpoint URL: give http://HOST:PORT or https://HOST, "
            "as for any AWS tool"
        )


def why(exc: BaseException) -> str:
    """An obstore error in one line, with what to do about it."""
    text = str(exc)
    status, code = _STATUS.search(text), _CODE.search(text)
    found = f" ({code.group(1)})" if code else ""
    if status is not None and status.group(1) in ("401", "403"):
        return (
            f"the store refused the credentials{found}: check AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY and AWS_REGION"
        )
    if code is not None and code.group(1) == "NoSuchBucket":
        return "no such bucket: create it, or check the bucket name and AWS_ENDPOINT_URL"
    if status is not None:
        return f"the store answered {status.group(1)}{found}"
    if "error sending request" in text or "timed out" in text.lower():
        return "the store is unreachable: check AWS_ENDPOINT_URL and that the store is up"
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def unreachable(exc: BaseException) -> bool:
    """Whether an obstore error says the store could not be reached at all."""
    return why(exc).startswith("the store is unreachable")


def get_note(client: Client, url: str, path: str) -> bytes | None:
    """A small object the library keeps beside its cassettes (a last-run note, a tool's
    report), or None when there is none; OSError in one line when it cannot be read."""
    try:
        return bytes(obstore.get(client, path).bytes())
    except MISSING:
        return None
    except FAILED as exc:
        raise OSError(f"cannot read {url}/{path}: {why(exc)}") from exc


def put_note(client: Client, url: str, path: str, data: bytes) -> None:
    """Write such an object whole; OSError in one line when it cannot be written."""
    try:
        obstore.put(client, path, data)
    except FAILED as exc:
        raise OSError(f"cannot write {url}/{path}: {why(exc)}") from exc
