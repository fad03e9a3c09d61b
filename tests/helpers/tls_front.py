"""A Temporal frontend that requires mutual TLS, as a real cluster or Temporal Cloud does, made of
the suite's dev server (plaintext gRPC) and a TLS-terminating proxy before it: the proxy verifies
the client's certificate against the test's CA (ALPN h2, as gRPC needs) and passes the bytes on.
`revoke(cert)` turns that certificate away from the next handshake (an expired or rotated-out
client certificate); `drop()` closes every connection open now, as a frontend restart does, so
the clients reconnect. The certificates: `Pki` writes a CA and certificates it signs."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core.local_ports import free_port


class Pki:
    """A throwaway CA in `directory`, and certificates it signs as PEM files."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test temporal CA")])
        cert = (
            self._builder(self._name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca = directory / "ca.pem"
        self.ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def _builder(
        self, subject: x509.Name, key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        now = dt.datetime.now(dt.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
        )

    def issue(self, name: str, *, server: bool = False) -> tuple[bytes, bytes]:
        """A certificate for `name` (a server one for localhost and 127.0.0.1) and its key."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = self._builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), key.public_key()
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return (
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )


def fingerprint(cert_pem: bytes) -> str:
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


class TlsFront:
    def __init__(self, pki: Pki, work: Path, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self.port = free_port()
        cert, key = pki.issue("temporal frontend", server=True)
        (work / "front.pem").write_bytes(cert)
        (work / "front.key").write_bytes(key)
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ssl.load_cert_chain(work / "front.pem", work / "front.key")
        self._ssl.load_verify_locations(pki.ca)
        self._ssl.verify_mode = ssl.CERT_REQUIRED
        self._ssl.set_alpn_protocols(["h2"])
        self._revoked: set[str] = set()
        self.accepted: list[str] = []  # the fingerprint of each client certificate let through
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def revoke(self, cert_pem: bytes) -> None:
        self._revoked.add(fingerprint(cert_pem))

    def drop(self) -> int:
        """Close every connection open now (both sides); how many there were."""
        dropped = len(self._writers)
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        return dropped

    async def __aenter__(self) -> TlsFront:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, ssl=self._ssl
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()
        for pump in list(self._pumps):
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        seen = hashlib.sha256(peer).hexdigest() if peer else ""
        if seen in self._revoked:
            writer.close()
            return
        self.accepted.append(seen)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(src, dst, {writer, up_writer}))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        pair: set[asyncio.StreamWriter],
    ) -> None:
        with contextlib.suppress(Exception):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        for w in pair:
            w.close()
            self._writers.discard(w)
