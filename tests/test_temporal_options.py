"""Temporal connection options for a real cluster (TLS, mTLS, API key, namespace), checked at
the level of Settings -> client_options(), which is exactly what Client.connect receives."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.service import TLSConfig

from core.payload_converter import data_converter
from core.settings import Settings
from core.temporal import client_options, tls_config

API_KEY = "tmprl-api-key-3c1d9a7e5b"
JWT_SECRET = "jwt-signing-secret-9f8e7d6c5b4a3f2e1d0c"


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's shell (or CI) may export MODEL_ROUTER_* variables; these tests describe
    # what each explicit setting does, so nothing from outside may leak in.
    for name in list(os.environ):
        if name.startswith("MODEL_ROUTER_"):
            monkeypatch.delenv(name)


def make_settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def write_self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A throwaway certificate and its private key as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_plain_connection_has_no_tls_and_no_api_key() -> None:
    options = client_options(make_settings(temporal_address="127.0.0.1:7233"))

    assert options["tls"] is False
    assert "api_key" not in options
    assert options["namespace"] == "default"
    # Workflows exchange pydantic models; the default converter would fail on them at runtime.
    assert options["data_converter"] is data_converter


def test_namespace_is_passed_through() -> None:
    options = client_options(make_settings(temporal_namespace="model-router.a1b2c"))

    assert options["namespace"] == "model-router.a1b2c"


def test_tls_on_uses_system_roots() -> None:
    tls = tls_config(make_settings(temporal_tls=True))

    assert tls == TLSConfig(
        server_root_ca_cert=None, client_cert=None, client_private_key=None, domain=None
    )


def test_tls_with_private_ca_and_server_name(tmp_path: Path) -> None:
    ca_cert, _ = write_self_signed(tmp_path, "private-ca")

    tls = tls_config(
        make_settings(
            temporal_tls=True,
            temporal_tls_server_ca_cert=ca_cert,
            temporal_tls_server_name="temporal.internal",
        )
    )

    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == ca_cert.read_bytes()
    assert tls.domain == "temporal.internal"
    assert tls.client_cert is None and tls.client_private_key is None


def test_mtls_reads_client_cert_and_key(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path, "model-router-client")

    options = client_options(
        make_settings(temporal_tls_client_cert=cert, temporal_tls_client_key=key)
    )

    tls = options["tls"]
    assert isinstance(tls, TLSConfig), "a client certificate must turn TLS on by itself"
    assert tls.client_cert == cert.read_bytes()
    assert tls.client_private_key == key.read_bytes()
    assert tls.client_cert.startswith(b"-----BEGIN CERTIFICATE-----")
    assert tls.client_private_key.startswith(b"-----BEGIN PRIVATE KEY-----")


@pytest.mark.parametrize("present", ["cert", "key"])
def test_half_a_client_certificate_is_an_error(tmp_path: Path, present: str) -> None:
    cert, key = write_self_signed(tmp_path, "half")
    values: dict[str, Any] = (
        {"temporal_tls_client_cert": cert}
        if present == "cert"
        else {"temporal_tls_client_key": key}
    )

    with pytest.raises(ValueError, match="go together"):
        client_options(make_settings(**values))


@pytest.mark.parametrize("material", ["temporal_tls_server_ca_cert", "temporal_tls_server_name"])
def test_server_verification_material_implies_tls(tmp_path: Path, material: str) -> None:
    ca_cert, _ = write_self_signed(tmp_path, "ca")
    value: object = ca_cert if material == "temporal_tls_server_ca_cert" else "temporal.internal"

    tls = tls_config(make_settings(**{material: value}))

    assert isinstance(tls, TLSConfig), f"{material} alone must not fall back to plaintext"


def test_missing_certificate_file_fails_instead_of_connecting_without_it(tmp_path: Path) -> None:
    _, key = write_self_signed(tmp_path, "client")

    with pytest.raises(FileNotFoundError):
        client_options(
            make_settings(
                temporal_tls_client_cert=tmp_path / "absent.crt", temporal_tls_client_key=key
            )
        )


def test_api_key_implies_tls_and_is_passed_as_api_key() -> None:
    options = client_options(
        make_settings(temporal_api_key=API_KEY, temporal_namespace="model-router.a1b2c")
    )

    assert options["api_key"] == API_KEY
    assert isinstance(options["tls"], TLSConfig), "Temporal Cloud API keys only work over TLS"
    assert options["namespace"] == "model-router.a1b2c"


def test_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_ROUTER_TEMPORAL_API_KEY", API_KEY)
    monkeypatch.setenv("MODEL_ROUTER_TEMPORAL_NAMESPACE", "model-router.a1b2c")

    options = client_options(Settings(_env_file=None))

    assert options["api_key"] == API_KEY
    assert options["namespace"] == "model-router.a1b2c"


def test_settings_never_show_secrets(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path, "client")
    settings = make_settings(
        temporal_api_key=API_KEY,
        auth_jwt_secret=JWT_SECRET,
        temporal_tls_client_cert=cert,
        temporal_tls_client_key=key,
    )

    for shown in (repr(settings), str(settings), f"{settings}", repr(settings.model_dump())):
        assert API_KEY not in shown
        assert JWT_SECRET not in shown
    # The secrets are still there for the code that needs them.
    assert settings.temporal_api_key is not None
    assert settings.temporal_api_key.get_secret_value() == API_KEY
    assert settings.auth_jwt_secret is not None
    assert settings.auth_jwt_secret.get_secret_value() == JWT_SECRET
