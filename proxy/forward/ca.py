"""The forward proxy's run-scoped CA: made at each start by `cryptography`, its key in memory
only, name-constrained to the intercepted hosts; a leaf certificate and a server-side
`ssl.SSLContext` per host, minted when first asked and cached."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import ssl
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tapeproxy.outputs import write_whole

# Hosts whose TLS contexts are kept (a context with its leaf is ~10 KB): an agent talks to a
# handful of hosts; a crawl through `--intercept '*.example.com'` evicts the oldest.
CONTEXTS = 256
# A `run` lasts minutes, a `serve --forward` in a compose stack weeks: the CA lasts a year
# (its key dies with the process, so no one can sign with it after), each leaf a week, made
# anew when a day old; both from a day back, for a client's clock that runs late.
VALID = datetime.timedelta(days=365)
LEAF_VALID = datetime.timedelta(days=7)
LEAF_REFRESH = datetime.timedelta(days=1)
SKEW = datetime.timedelta(days=1)


def constraint(host: str) -> str:
    """The nameConstraints DNS name that permits `host`: `*.example.com` -> `example.com`
    (RFC 5280: a DNS constraint permits the name and every name below it); a pattern with a
    `*` inside a label, the labels after the last such one (`bedrock-runtime.*.amazonaws.com`
    -> `amazonaws.com`: a constraint cannot say "one label", so it permits that domain)."""
    if host.startswith("*."):
        return host[2:]
    labels = host.split(".")
    wild = [i for i, label in enumerate(labels) if "*" in label]
    return ".".join(labels[wild[-1] + 1 :]) if wild else host


class RunCA:
    """One run's CA. `context(host)` is a server-side TLS context presenting a leaf for
    `host`, offering HTTP/1.1 only over ALPN. The CA's certificate is `pem`; its key and the
    leaves' key are never serialized except into a pipe, to load them into OpenSSL."""

    def __init__(self, hosts: Iterable[str]) -> None:
        names = sorted({constraint(h.lower().rstrip(".")) for h in hosts})
        if not names:
            raise ValueError("a forward-proxy CA needs at least one intercepted host")
        self.names = tuple(names)
        # P-256: a key in ~0.1 ms (RSA-2048 takes ~50 ms at every start) that every TLS
        # client of the last decade accepts.
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tapeproxy"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"tapeproxy run CA {os.getpid()}"),
            ]
        )
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(name_constraints(self.names), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        self._contexts: OrderedDict[str, tuple[datetime.datetime, ssl.SSLContext]] = OrderedDict()
        self._lock = threading.Lock()  # contexts are made in worker threads
        self._probe: ssl.SSLContext | None = None

    def covers(self, host: str) -> bool:
        """Whether the name constraints permit `host` (an IP address never)."""
        host = host.lower().rstrip(".")
        return any(host == n or host.endswith("." + n) for n in self.names)

    def leaf(self, host: str) -> x509.Certificate:
        """A certificate for `host`, signed by this CA, with the leaves' shared key."""
        now = datetime.datetime.now(datetime.UTC)
        ca_public = self._key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self.certificate.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(now + LEAF_VALID)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    def cached(self, host: str) -> ssl.SSLContext | None:
        """`host`'s context if one was made less than LEAF_REFRESH ago (no signing: fine on
        the event loop)."""
        host = host.lower().rstrip(".")
        with self._lock:
            found = self._contexts.get(host)
            if found is None or datetime.datetime.now(datetime.UTC) - found[0] >= LEAF_REFRESH:
                return None
            self._contexts.move_to_end(host)
            return found[1]

    def context(self, host: str) -> ssl.SSLContext:
        """The server-side context for `host` (made when first asked and when a day old;
        from the cache in between)."""
        found = self.cached(host)
        if found is not None:
            return found
        host = host.lower().rstrip(".")
        made = (datetime.datetime.now(datetime.UTC), self._make_context(host))
        with self._lock:
            self._contexts[host] = made
            self._contexts.move_to_end(host)
            while len(self._contexts) > CONTEXTS:
                self._contexts.popitem(last=False)
        return made[1]

    def probe(self) -> ssl.SSLContext:
        """A context offering `http/1.1` then `h2`, to learn what a client offers
        (tapeproxy.forward.hello); its certificate is never checked by anyone."""
        if self._probe is None:
            self._probe = self._make_context(self.names[0], ["http/1.1", "h2"])
        return self._probe

    def _make_context(self, host: str, alpn: list[str] | None = None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # The door speaks HTTP/1.1 inside a tunnel.
        context.set_alpn_protocols(alpn or ["http/1.1"])
        chain = self.leaf(host).public_bytes(serialization.Encoding.PEM) + self.pem
        key = self._leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # `ssl` loads a certificate and key only from a path: each goes through a pipe, read
        # by OpenSSL as /dev/fd/N, so the key never touches a disk.
        with _piped(chain) as chain_path, _piped(key) as key_path:
            context.load_cert_chain(chain_path, key_path)
        return context

    def write_certificate(self, path: Path) -> None:
        """The CA's certificate (never its key) in `path`, whole; readable by all (a client
        in another container reads it)."""
        write_whole(path, lambda out: out.write(self.pem))


def name_constraints(names: Iterable[str]) -> x509.NameConstraints:
    """Permits the DNS `names` (and the names below them) and no IP address at all."""
    excluded: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
        x509.IPAddress(ipaddress.ip_network("::/0")),
    ]
    permitted: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=excluded)


class _piped:
    """`data` readable once at a /dev/fd path, through a pipe (a PEM is far below its buffer)."""

    def __init__(self, data: bytes) -> None:
        self._read, write = os.pipe()
        try:
            os.write(write, data)
        finally:
            os.close(write)

    def __enter__(self) -> str:
        return f"/dev/fd/{self._read}"

    def __exit__(self, *exc: object) -> None:
        os.close(self._read)


def bundle(ca_pem: bytes, own: Iterable[str] = ()) -> bytes:
    """What a child process is told to trust: the system's roots (OpenSSL's default file,
    with the roots the machine's owner added; certifi's where there is none), the files
    `own` names (those the user's environment named for trust: a company's root) and the
    run's CA."""
    default = ssl.get_default_verify_paths().cafile
    files = [default] if default and Path(default).is_file() else []
    if not files:
        with contextlib.suppress(ImportError):
            import certifi

            files.append(certifi.where())
    parts = []
    for name in dict.fromkeys([*files, *own]):  # (once each, in order)
        with contextlib.suppress(OSError):
            parts.append(Path(name).read_bytes().strip(b"\n"))
    return b"\n".join([*parts, ca_pem])
