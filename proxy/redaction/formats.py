"""Well-known credential formats, scrubbed from every body and stream by default: one row per
format, each citing where its shape comes from. `--redact-keep NAME` (or `all`) opts out.

A row is strict enough that ordinary text does not match: a fixed prefix, no letter or
digit before it (a lookbehind after the prefix, so the pattern starts with a literal; for
the rows of any length, no `-` either: a key starts a run of key characters, so a run that
repeats a prefix is searched once, not again from each repeat to its end), and
the length and alphabet the issuer documents (or the gitleaks rule, MIT,
https://github.com/gitleaks/gitleaks/tree/master/cmd/generate/config/rules, that tracks it).
A detector library (detect-secrets) was not used: its plugins judge a line and return the
values they found, while a stream needs match spans over text assembled across frames, and
its entropy heuristics would scrub hashes and ids that key requests."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tapeproxy.errors import ConfigError
from tapeproxy.redaction.percent import decoded

# name -> (regular expression, source of the shape)
FORMATS: dict[str, tuple[str, str]] = {
    # `sk-`, `sk-proj-`, `sk-svcacct-`, `sk-admin-` then 32+ key characters with a digit
    # (real keys are 48 to 160 characters): `sk-learn-...` prose and short ids stay.
    "openai": (
        r"sk-(?<![\w-]sk-)(?!ant-)(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{32,}",
        "https://platform.openai.com/docs/api-reference/authentication; gitleaks openai.go",
    ),
    "anthropic": (
        r"sk-ant-(?<!\wsk-ant-)[a-z]+\d*-[A-Za-z0-9_-]{32,}",  # sk-ant-api03-, sk-ant-admin01-
        "https://docs.anthropic.com/en/api/getting-started; gitleaks anthropic.go",
    ),
    "google": (
        r"AIza(?<!\wAIza)[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
        "https://cloud.google.com/docs/authentication/api-keys; gitleaks gcp.go",
    ),
    "github": (
        r"(?:gh[pousr]_(?<!\wgh._)[A-Za-z0-9]{36}|github_pat_(?<!\wgithub_pat_)\w{82})(?!\w)",
        "https://github.blog/2021-04-05-behind-githubs-new-authentication-token-formats/; "
        "gitleaks github.go",
    ),
    # The Realtime API's ephemeral client secrets (a browser's short-lived key).
    "openai-ephemeral": (
        r"ek_(?<!\wek_)[A-Za-z0-9]{32,}",
        "https://platform.openai.com/docs/api-reference/realtime-sessions",
    ),
    "aws": (
        r"A(?:KIA|SIA|BIA|CCA)(?<!\wA...)[A-Z2-7]{16}\b",  # key ids (secret keys are bare)
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html; "
        "gitleaks aws.go",
    ),
    # An AWS session token has no shape of its own, but AWS quotes it after its header's name:
    # a 403 for a signature mismatch holds the canonical string, `x-amz-security-token:TOKEN`
    # among the signed headers (litellm#14763); a presigned URL, `X-Amz-Security-Token=TOKEN`;
    # headers shown as JSON or as a Python dict (botocore's debug lines).
    "aws-session": (
        r"(?:x-amz-security-token|X-Amz-Security-Token)['\"]?[:=][ \t]*b?['\"]?"
        r"[^\s'\"\\&,;<]{16,}",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html",
    ),
    "slack": (
        r"xox[a-z]-(?<!\wxox.-)\d+-[0-9A-Za-z-]{10,}",  # xoxb-, xoxp-, xoxa-, xoxe-, ...
        "https://api.slack.com/authentication/token-types; gitleaks slack.go",
    ),
    # Header and payload are base64url JSON objects (`{"` is `eyJ`); the signature may be
    # empty (`alg: none`).
    "jwt": (
        r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        "https://datatracker.ietf.org/doc/html/rfc7519#section-3; gitleaks jwt.go",
    ),
}
ALL = "all"
# Every key of a format holds one of these: a text holding none (most text) is passed over
# without running the pattern (a substring search is some 30 times faster). GitHub's are
# looked for only where an `_` is (one quick scan for a single character).
HINTS = (
    "sk-",
    "AIza",
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "xox",
    "eyJ",
    "x-amz-security-token",
    "X-Amz-Security-Token",
)
UNDERSCORED_HINTS = ("ek_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
# An escape that decodes to a hint's character (through `%25`s, for a text encoded twice or
# more): only then may the decoded text hold a hint the text does not. `%20`, `%2F` or `%3D`
# cannot make one (nor hide one: a hint is spelled out on one side of it).
_HINT_ESCAPE = re.compile(
    "%(?:25)*(?:"
    + "|".join(sorted({f"{ord(c):02x}" for hint in (*HINTS, *UNDERSCORED_HINTS) for c in hint}))
    + ")",
    re.IGNORECASE,
)


# The hints in groups, each behind what all of its hints hold (a character rare in prose
# and JSON: one scan, some 40 times cheaper than a hint's): a text without it holds none of
# them. Every hint is in one group (test_formats checks both).
GATED: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("J",), ("eyJ",)),
    (("X",), ("X-Amz-Security-Token",)),
    (("A",), ("AIza", "AKIA", "ASIA", "ABIA", "ACCA")),
    (("x",), ("xox", "x-amz-security-token")),
    (("_", "gh"), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    (("_",), ("ek_", "github_pat_")),
    (("-",), ("sk-",)),
)


def may_hold_key(text: str) -> bool:
    """Whether `text` may hold a key of some format (never False for one that does), spelled
    as it is or percent-encoded (`ghp%5F...`). Run on every log line and every body scrubbed:
    a plain loop over the gated hints, half the cost of `any()` over a generator."""
    for gates, hints in GATED:
        for gate in gates:
            if gate not in text:
                break
        else:
            for hint in hints:
                if hint in text:
                    return True
    if "%" in text and _HINT_ESCAPE.search(text):
        plain = decoded(text)
        return plain != text and may_hold_key(plain)
    return False


def check_keep(names: Iterable[str]) -> tuple[str, ...]:
    """Format names to leave unscrubbed, checked: each a row of FORMATS, or `all`."""
    kept = tuple(name.strip().lower() for name in names)
    unknown = [name for name in kept if name != ALL and name not in FORMATS]
    if unknown:
        raise ConfigError(
            f"no key format named {', '.join(map(repr, unknown))}; known formats: "
            f"{', '.join(FORMATS)} (or {ALL})"
        )
    return kept


def formats_pattern(keep: Iterable[str] = ()) -> re.Pattern[str] | None:
    """One pattern matching every format not kept, or None when all are kept."""
    kept = check_keep(keep)
    if ALL in kept:
        return None
    chosen = [regex for name, (regex, _) in FORMATS.items() if name not in kept]
    return re.compile("|".join(f"(?:{regex})" for regex in chosen)) if chosen else None
