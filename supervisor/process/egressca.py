"""The per-run certificate authority of egress with secrets, and the proxy's upstream trust.

A child given a secret with hosts (`secrets = [{ name, hosts }]`) trusts this CA alone
(`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS` name its certificate, written in
its scratch directory); the proxy terminates its TLS with a certificate for the host it asked
for, signed by this CA, so that it can swap the secret's placeholder in the request headers.
The CA's key and the leaf keys exist in memory only: a leaf's chain reaches `ssl` through a
memfd, never a file. Upstream, the proxy verifies the host's certificate against the system's
store, or the bundle named by `TRUST_ENV` (a private CA; the tests' loopback servers).
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: A PEM bundle the proxy verifies upstream hosts against instead of the system's store.
TRUST_ENV: Final = "MCPX_HOOKS_EGRESS_TRUST"
#: How long a run's CA and its leaves are valid (a run is shorter; clocks may differ a little).
_VALID: Final = dt.timedelta(days=2)
_PEM: Final = serialization.Encoding.PEM


def upstream_context(cafile: str | None = None) -> ssl.SSLContext:
    """How the proxy verifies upstream hosts: `cafile`, else `TRUST_ENV`'s, else the
    system's store."""
    cafile = cafile or os.environ.get(TRUST_ENV) or None
    return ssl.create_default_context(cafile=cafile)


class RunCA:
    """A CA made for one child's lease, and the server contexts of the hosts it was asked."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcpx-hooks egress run CA")])
        now = dt.datetime.now(dt.UTC)
        self._name = name
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
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
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}

    @property
    def pem(self) -> bytes:
        """The CA's certificate (never its key), for the child's trust store."""
        return self.cert.public_bytes(_PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for `host` signed by this CA."""
        found = self._contexts.get(host)
        if found is None:
            found = self._contexts[host] = self._make_context(host)
        return found

    def _make_context(self, host: str) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        try:
            import ipaddress

            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + _VALID)
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        chain = (
            key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            + cert.public_bytes(_PEM)
            + self.pem
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        fd = os.memfd_create("mcpx-egress-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, chain)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx
