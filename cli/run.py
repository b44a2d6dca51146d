"""`tapeproxy run [serve options] -- CMD [ARGS...]`: CMD run behind the forward proxy, on a
free loopback port, with its environment pointing every common runtime at it and at a CA
bundle that trusts the run's CA; a summary at the end; CMD's exit status."""

from __future__ import annotations

import inspect
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tapeproxy.engine.stats import Counters
from tapeproxy.settings import Settings

log = logging.getLogger("tapeproxy")

# Where each runtime looks for the proxy and for the roots it trusts.
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
TRUST_VARIABLES = (
    "SSL_CERT_FILE",  # Python's ssl, OpenSSL, aiohttp, httpx
    "REQUESTS_CA_BUNDLE",  # requests
    "AWS_CA_BUNDLE",  # botocore (boto3, the AWS CLI): it wins over REQUESTS_CA_BUNDLE
    "CURL_CA_BUNDLE",  # curl
    "NODE_EXTRA_CA_CERTS",  # Node (on top of its own roots)
    "GIT_SSL_CAINFO",  # git
)
LOOPBACK = ("localhost", "127.0.0.1", "::1")
FORWARDED = (signal.SIGTERM, signal.SIGHUP)
# Hosts the summary names of those refused, and of those tunnelled (the rest are counted).
SHOWN = 8
# serve's options a run sets itself: a free loopback port, with the forward proxy on.
PICKED = ("host", "port", "forward", "ready_file")


def command(serve: Callable[..., None], settings_of: Callable[[dict[str, Any]], Settings]) -> Any:
    """The `run` command: serve's options (taken from its signature, so the two never
    drift apart), `--fail-on-miss`, and CMD."""

    def run(**options: Any) -> None:
        """Run CMD behind tapeproxy's forward proxy: its requests to the providers' hosts
        (and --upstream and --intercept hosts) are recorded and replayed, with no base URL
        to set. Exits with CMD's status. Example: tapeproxy run --mode record -- claude -p hi"""
        argv, fail_on_miss = options.pop("cmd"), options.pop("fail_on_miss")
        options["log_level"] = options["log_level"] or "warning"  # CMD's stderr stays its own
        options.update(dict.fromkeys(PICKED))
        raise typer.Exit(run_with_proxy(settings_of(options), argv, fail_on_miss))

    params = [
        p
        for p in inspect.signature(serve, eval_str=True).parameters.values()
        if p.name not in PICKED
    ]
    params.append(
        inspect.Parameter(
            "fail_on_miss",
            inspect.Parameter.KEYWORD_ONLY,
            default=False,
            annotation=Annotated[
                bool, typer.Option(help="Exit 1 when CMD succeeded but requests missed.")
            ],
        )
    )
    params.append(
        inspect.Parameter(
            "cmd",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[
                list[str],
                typer.Argument(metavar="CMD", help="The command and its arguments, after --."),
            ],
        )
    )
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    )
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def run_with_proxy(settings: Settings, argv: list[str], fail_on_miss: bool) -> int:
    """Start the server, run CMD behind it, stop it, print the summary; the exit status
    (CMD's; 1 with --fail-on-miss when CMD succeeded but requests missed; as `serve`'s when
    the server could not start; as `serve`'s end: 4 when a recording could not be written,
    3 with --fail-on-unused)."""
    from tapeproxy.cli.background import BackgroundServer
    from tapeproxy.cli.server import opened_store, report
    from tapeproxy.errors import ConfigError
    from tapeproxy.forward.ca import bundle
    from tapeproxy.logs import configure_logging

    configure_logging(settings.log_level)
    opened = opened_store(settings)  # (as serve: one no backend opens, or a mode cannot write)
    if isinstance(opened, int):
        return opened
    with tempfile.TemporaryDirectory(prefix="tapeproxy-run-") as folder:
        ca_file = settings.ca_cert or Path(folder) / "ca.pem"
        update = {"forward": True, "host": "127.0.0.1", "port": 0, "ca_cert": ca_file}
        try:
            server = BackgroundServer(settings.model_copy(update=update)).start()
        except ConfigError as exc:
            log.error("%s", exc.message)
            return 2
        door = server.server.forward
        assert door is not None
        try:
            trust = Path(folder) / "bundle.pem"
            own = [os.environ[n] for n in TRUST_VARIABLES if os.environ.get(n)]
            trust.write_bytes(bundle(door.ca.pem, own))
            status = child(argv, environment(server.url, trust, door.hosts.patterns))
        finally:
            server.stop()
    final = server.server.final
    counts = final.counters if final is not None else None
    # As serve ends (4: a recording could not be written; 3: --fail-on-unused), its lines
    # first: the summary is the last line.
    ended = report(final, settings) if final is not None else 1
    print(summary(counts, door.refused, door.tunnelled), file=sys.stderr, flush=True)
    if status == 0 and ended:
        return ended
    if fail_on_miss and status == 0 and counts is not None and counts.misses:
        return 1
    return status


def summary(counts: Counters | None, refused: set[str], tunnelled: set[str]) -> str:
    """`tapeproxy: replayed N, recorded N, misses N`, then what was refused or tunnelled."""
    c = counts or Counters()
    line = f"tapeproxy: replayed {c.replayed}, recorded {c.recorded}, misses {c.misses}"
    if refused:
        line += f"; refused {named(refused)} (let one through with --allow-host)"
    if tunnelled:
        line += f"; tunnelled {named(tunnelled)}"
    return line


def named(targets: set[str]) -> str:
    """The first SHOWN of `targets`, then how many more: one line, however many."""
    shown = ", ".join(sorted(targets)[:SHOWN])
    return shown if len(targets) <= SHOWN else f"{shown} and {len(targets) - SHOWN} more"


def environment(url: str, trust: Path, intercepted: list[str]) -> dict[str, str]:
    """The user's environment with the proxy and the CA bundle set for CMD (theirs unchanged):
    their NO_PROXY kept but for what covers an `intercepted` host (a `*` in CI, say), which
    would reach it directly, recorded never and in a replay over the network."""
    env = dict(os.environ)
    for name in PROXY_VARIABLES:
        env[name] = url
    given = [h.strip() for h in env.get("NO_PROXY", env.get("no_proxy", "")).split(",")]
    bypass = [h for h in given if h and any(covers(h, i) for i in intercepted)]
    if bypass:
        log.warning("tapeproxy run: NO_PROXY: dropped %s (intercepted hosts)", ", ".join(bypass))
    kept = [h for h in given if h and h not in bypass]
    env["NO_PROXY"] = env["no_proxy"] = ",".join([*kept, *(h for h in LOOPBACK if h not in kept)])
    env["NODE_USE_ENV_PROXY"] = "1"
    for name in TRUST_VARIABLES:
        env[name] = str(trust)
    return env


def covers(entry: str, pattern: str) -> bool:
    """Whether a NO_PROXY `entry` (`*`, `example.com`, `.example.com`, `*.example.com`: each
    the name and those below it, as curl and requests read it) takes in a host `pattern`
    matches (`*.example.com` too)."""
    name = entry.lower().removeprefix("*").lstrip(".").rstrip(".").partition(":")[0]
    host, below = pattern.removeprefix("*."), pattern.startswith("*.")
    inside = below and name.endswith("." + host)  # a name a wildcard pattern takes in
    return entry == "*" or host == name or host.endswith("." + name) or inside


def child(argv: list[str], env: dict[str, str]) -> int:
    """CMD's exit status (127: not found, 126: not runnable; 128+N: killed by signal N)."""
    try:
        process = subprocess.Popen(argv, env=env)
    except FileNotFoundError:
        log.error("tapeproxy run: command not found: %s", argv[0])
        return 127
    except PermissionError:
        log.error("tapeproxy run: not runnable: %s", argv[0])
        return 126
    # A SIGTERM or SIGHUP to `tapeproxy run` is CMD's to answer: passed on, and its exit
    # awaited, so the recordings are written and the summary printed after it.
    passed = {sig: signal.signal(sig, lambda n, _: process.send_signal(n)) for sig in FORWARDED}
    try:
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:  # the child got the Ctrl-C too: its own exit is awaited
                continue
    finally:
        for sig, handler in passed.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
