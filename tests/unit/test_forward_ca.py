"""The run-scoped CA: name-constrained, its leaves trusted for its hosts only, no key on disk."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from tapeproxy.forward import ca as ca_module
from tapeproxy.forward.ca import RunCA, bundle


def test_the_ca_carries_critical_name_constraints_with_no_ip_address() -> None:
    ca = RunCA(["api.openai.com", "*.example.com"])
    ext = ca.certificate.extensions.get_extension_for_class(x509.NameConstraints)
    assert ext.critical
    permitted = {n.value for n in ext.value.permitted_subtrees or []}
    assert permitted == {"api.openai.com", "example.com"}
    excluded = {n.value for n in ext.value.excluded_subtrees or []}
    assert excluded == {ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")}
    basic = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0


def test_each_start_makes_a_new_ca() -> None:
    assert RunCA(["api.openai.com"]).pem != RunCA(["api.openai.com"]).pem


def test_covers_follows_the_constraints() -> None:
    ca = RunCA(["api.openai.com", "*.example.com"])
    assert ca.covers("api.openai.com") and ca.covers("a.b.example.com")
    assert not ca.covers("openai.com") and not ca.covers("evil.com")


def test_contexts_are_cached_per_host() -> None:
    ca = RunCA(["api.openai.com"])
    assert ca.context("api.openai.com") is ca.context("API.openai.com.")


def test_a_long_serve_forward_outlives_its_first_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    # (`serve --forward` in a compose stack runs for weeks: a CA and leaves of 7 days each
    # failed every client after a week)
    ca = RunCA(["api.openai.com"])
    lasts = ca.certificate.not_valid_after_utc - ca.certificate.not_valid_before_utc
    assert lasts >= datetime.timedelta(days=365)
    first = ca.context("api.openai.com")
    monkeypatch.setattr(ca_module, "LEAF_REFRESH", datetime.timedelta(0))  # a day later
    assert ca.cached("api.openai.com") is None
    assert ca.context("api.openai.com") is not first  # a fresh leaf


async def handshake(ca: RunCA, leaf_host: str, client_host: str, trust: Path) -> None:
    """A TLS client trusting only `trust` connects to a server presenting `leaf_host`'s leaf."""
    server_ctx = ca.context(leaf_host)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=str(trust))
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname=client_host
        )
        writer.close()
    finally:
        server.close()


def test_a_leaf_verifies_for_its_host_and_alpn_is_http11(tmp_path: Path) -> None:
    ca = RunCA(["api.openai.com"])
    trust = tmp_path / "ca.pem"
    ca.write_certificate(trust)
    assert trust.read_bytes() == ca.pem and b"PRIVATE KEY" not in trust.read_bytes()
    asyncio.run(handshake(ca, "api.openai.com", "api.openai.com", trust))


def test_a_leaf_outside_the_constraints_fails_verification(tmp_path: Path) -> None:
    # The CA signs what it is asked to; a client that trusts it refuses a name it may not vouch for.
    ca = RunCA(["api.openai.com"])
    trust = tmp_path / "ca.pem"
    ca.write_certificate(trust)
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(handshake(ca, "www.example.org", "www.example.org", trust))


def test_the_bundle_holds_system_roots_and_the_run_ca() -> None:
    ca = RunCA(["api.openai.com"])
    joined = bundle(ca.pem)
    assert joined.endswith(ca.pem)
    assert joined.count(b"BEGIN CERTIFICATE") > 10
    assert b"PRIVATE KEY" not in joined
    system = ssl.get_default_verify_paths().cafile
    if system and Path(system).is_file():  # the machine's own roots, with what its owner added
        assert joined.startswith(Path(system).read_bytes().strip(b"\n"))


def test_the_certificate_is_written_through_no_planted_link(tmp_path: Path) -> None:
    # (`--ca-cert /tmp/ca.pem`: another user of /tmp could plant the name it was written
    # aside under, a link to a file of ours, and have it overwritten)
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / f".ca.pem.{os.getpid()}.tmp").symlink_to(victim)
    ca = RunCA(["api.openai.com"])
    ca.write_certificate(tmp_path / "ca.pem")
    assert victim.read_text() == "mine"
    assert (tmp_path / "ca.pem").read_bytes() == ca.pem
    assert (tmp_path / "ca.pem").stat().st_mode & 0o777 == 0o644  # for other containers


def test_a_pattern_with_a_star_inside_a_label_is_constrained_to_the_domain_after_it() -> None:
    ca = RunCA(["bedrock-runtime.*.amazonaws.com", "*-aiplatform.googleapis.com"])
    ext = ca.certificate.extensions.get_extension_for_class(x509.NameConstraints)
    permitted = {n.value for n in ext.value.permitted_subtrees or []}
    assert permitted == {"amazonaws.com", "googleapis.com"}
    assert ca.covers("bedrock-runtime.us-east-1.amazonaws.com")
    assert not ca.covers("evil.com")
