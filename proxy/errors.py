"""The one tapeproxy error tree, and how each error looks on the wire.

    TapeproxyError
     +-- ConfigError          a bad option or value, found at start
     |    +-- BadFault        a fault spec that does not parse (400 on a header or PUT)
     +-- BadCassetteName      a cassette name that is not a safe relative name (400)
     +-- BadPath              a request path that climbs above its upstream's base (400)
     +-- BodyTooLarge         a request body over --max-body (413)
     +-- UnknownUpstream      a route prefix that names no upstream (404)
     +-- NeedsResign          a SigV4-signed request going live with no --resign aws (400)
     +-- CassetteMiss         replay found no recording for a request (422)
     |    +-- OutOfOrder      --strict-order: a request came out of the recorded order (422)
     |    +-- StoreUnreachable  the cassette store cannot be reached, and no local copy (422)
     +-- CassetteCorrupt      an exchange file that cannot be read back (422)
     +-- ClientGone           the client left before its answer was whole (499, never seen)
     +-- UpstreamError        the upstream did not answer properly
          +-- UpstreamUnreachable   connection refused, reset, DNS (502)
          +-- UpstreamTimeout       no answer in time (504)
          +-- UpstreamCut           the upstream stopped mid-answer
               +-- AnswerRefused    an answer cut on its way: a compression bomb
               +-- Dropped          a fault: the connection closed before any byte

Lower-level errors (OSError, TimeoutError, aiohttp's, pydantic) are translated at the boundary
with ``raise X(...) from exc``.
"""

from __future__ import annotations


class TapeproxyError(Exception):
    """Root of every error tapeproxy raises on purpose."""

    status: int = 500
    error_type: str = "tapeproxy_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(TapeproxyError):
    status = 400
    error_type = "config_error"


class BadFault(ConfigError):
    error_type = "bad_fault"


class BadCassetteName(TapeproxyError):
    status = 400
    error_type = "bad_cassette_name"


class BadPath(TapeproxyError):
    status = 400
    error_type = "bad_path"


class BadBody(TapeproxyError):
    """A request body tapeproxy cannot key and scrub (JSON nested past Python's recursion
    limit): refused before anything is forwarded or written."""

    status = 400
    error_type = "bad_body"


class BodyTooLarge(TapeproxyError):
    status = 413
    error_type = "request_too_large"


class UnknownUpstream(TapeproxyError):
    status = 404
    error_type = "unknown_upstream"


class NeedsResign(TapeproxyError):
    """A request signed for tapeproxy's own host (SigV4 covers the host) that would go live:
    the real host would refuse its signature."""

    status = 400
    error_type = "needs_resign"


class CassetteMiss(TapeproxyError):
    # 422: a client error the OpenAI and Anthropic SDKs never retry (they retry 408, 409, 429, 5xx).
    status = 422
    error_type = "cassette_miss"


class OutOfOrder(CassetteMiss):
    """--strict-order: a recorded request came at another position than recorded."""

    error_type = "cassette_out_of_order"


class StoreUnreachable(CassetteMiss):
    """A replay that cannot reach the cassette store (S3) and has no local copy of what it
    asked: a miss, whose message says the store is unreachable."""


class CassetteCorrupt(TapeproxyError):
    """A recording (or a cassette) that cannot be read back. 422, as a miss: the OpenAI and
    Anthropic SDKs retry a 5xx, and a retry can only read the same file again (and, the
    first try having used the recording up, be told of a miss instead). Counted in
    `errors`: the fault is the library's, not the request's."""

    status = 422
    error_type = "cassette_corrupt"


class ClientGone(TapeproxyError):
    """The client hung up before its answer was whole: while tapeproxy waited for the
    upstream's answer to start, or mid-answer (a live answer's chunks end with it)."""

    status = 499  # nginx's "client closed request"; nobody is left to read it
    error_type = "client_closed_request"


class UpstreamError(TapeproxyError):
    status = 502
    error_type = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    status = 502
    error_type = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status = 504
    error_type = "upstream_timeout"


class UpstreamCut(UpstreamError):
    """The upstream stopped mid-answer, after the client already had the status line."""

    status = 502
    error_type = "upstream_cut"


class AnswerRefused(UpstreamCut):
    """A live answer broke a limit on its way to the client (a compression bomb): it is cut
    there, as an upstream cut, and nothing of it is recorded."""

    error_type = "answer_refused"


class Dropped(UpstreamCut):
    """A fault (`reset`, `timeout`): the connection is closed with nothing of the answer sent;
    a door closes it without the head."""

    error_type = "connection_dropped"
