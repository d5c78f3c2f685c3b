"""https:// servers: wss:// and REST verify the certificate. A server whose certificate is
signed by a CA we do not trust is refused; trusting that CA (an ssl context, as an operator
with a private CA would configure) makes both work. The CA and the server certificate are made
fresh per test with the ``cryptography`` package."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from adapters.mattermost.adapter import MattermostAdapter
from adapters.mattermost.urls import server_urls
from adapters.mattermost.websocket import EventStream
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import RecordingIntake
from testsupport.mattermost import FAST_BACKOFF, connected, make_config, wait_until


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca_and_server_cert(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost/127.0.0.1 signed by it (PEM files)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gateway test CA"))
        .issuer_name(_name("gateway test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = directory / "ca.pem", directory / "srv.pem", directory / "k.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, cert_path, key_path


@pytest.fixture
async def tls_fake(tmp_path: Path) -> AsyncIterator[tuple[FakeMattermost, Path]]:
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with FakeMattermost(ssl_context=server_ctx, url_host="localhost") as fake:
        yield fake, ca


async def test_untrusted_certificate_is_refused_on_wss(
    tls_fake: tuple[FakeMattermost, Path],
) -> None:
    fake, _ = tls_fake
    assert fake.url.startswith("https://localhost:")

    async def nothing(*_: Any) -> None:
        return None

    # no ssl_context: the system trust store, which does not know our test CA
    stream = EventStream(
        url=server_urls(fake.url).websocket_url,
        token=fake.bot.token or "",
        on_event=nothing,
        on_error=nothing,
        on_connected=nothing,
        backoff=FAST_BACKOFF,
        use_env_proxy=False,
    )
    assert server_urls(fake.url).websocket_url.startswith("wss://")
    task = asyncio.create_task(stream.run(), name="test-stream")
    try:
        await wait_until(lambda: stream.attempts >= 2, message="refused attempts")
    finally:
        await stream.stop()
        await asyncio.wait_for(task, 5)
    assert stream.connections == 0 and fake.connections_total == 0
    assert isinstance(stream.last_error, ssl.SSLCertVerificationError)


async def test_untrusted_certificate_is_refused_on_rest(
    tls_fake: tuple[FakeMattermost, Path], running: Any
) -> None:
    fake, _ = tls_fake
    adapter = MattermostAdapter(make_config(fake))
    await running(adapter, RecordingIntake())  # start() does not fail: it keeps retrying
    stream = adapter.stream
    assert stream is not None
    await wait_until(lambda: stream.attempts >= 2, message="retries")
    assert adapter.identity is None and fake.requests == []  # never got past TLS
    assert "CERTIFICATE_VERIFY_FAILED" in str(stream.last_error)


async def test_trusted_ca_connects_over_wss(
    tls_fake: tuple[FakeMattermost, Path], running: Any
) -> None:
    fake, ca = tls_fake
    client_ctx = ssl.create_default_context(cafile=str(ca))
    adapter = MattermostAdapter(make_config(fake, ssl_context=client_ctx))
    intake = RecordingIntake()
    await running(adapter, intake)
    await connected(adapter)
    assert adapter.identity is not None
    post = await fake.user_posts(fake.dm_alice, "over TLS")
    await wait_until(lambda: bool(intake.by_message(post["id"])), message="post over wss")
    await adapter.transport.send(
        intake.by_message(post["id"])[0].target, "answer", idempotency_key="tls:1"
    )
    assert [p["message"] for p in fake.bot_posts()] == ["answer"]
