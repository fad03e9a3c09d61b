"""What a process refuses to start with outside development and test (core/settings_rules.py):
beside the debugging switches (tests/test_metrics_endpoint.py), an HS256 signing key shorter
than 32 bytes; and what the API warns of, GET /metrics served without a token. Development
(`make dev`) and the test suite start as before."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from api.app import create_app
from cli.dev import DevStack
from core.settings import Settings
from core.settings_rules import open_metrics

KEY_31, KEY_32 = "k" * 31, "k" * 32


def test_a_short_signing_key_is_refused_outside_development_and_test() -> None:
    # Any one token it signed lets a short key be searched for offline, and then tokens of
    # every tenant and role be minted with it.
    with pytest.raises(ValidationError, match="auth_jwt_secret must be at least 32 bytes"):
        Settings(environment="production", auth_jwt_secret=KEY_31, _env_file=None)
    # Bytes, not characters: 11 three-byte characters are 33 bytes.
    assert Settings(environment="production", auth_jwt_secret="€" * 11, _env_file=None)
    assert Settings(environment="production", auth_jwt_secret=KEY_32, _env_file=None)
    for environment in ("development", "test"):
        assert Settings(environment=environment, auth_jwt_secret="dev", _env_file=None)
    # With an external issuer the secret signs nothing.
    assert Settings(
        environment="production",
        auth_algorithm="RS256",
        auth_jwks_url="https://idp.example/jwks.json",
        auth_jwt_secret=KEY_31,
        _env_file=None,
    )


def test_metrics_served_without_a_token_are_warned_of_outside_development_and_test(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Warned of, not refused: the compose stack and the k8s manifests scrape without a token.
    production = Settings(environment="production", auth_jwt_secret=KEY_32, _env_file=None)
    said = open_metrics(production, served=True)
    assert said is not None and "MODEL_ROUTER_METRICS_TOKEN" in said
    with caplog.at_level(logging.WARNING, logger="model_router.api"):
        assert create_app(production)
    assert [r.getMessage() for r in caplog.records if r.name == "model_router.api"] == [said]
    # A process that serves none (the migration Job, the CLI) reads the same settings.
    assert open_metrics(production, served=False) is None
    tokened = production.model_copy(update={"metrics_token": SecretStr("scrape-0123456789")})
    assert open_metrics(tokened, served=True) is None
    for environment in ("development", "test"):
        changed = production.model_copy(update={"environment": environment})
        assert open_metrics(changed, served=True) is None


def test_make_dev_settings_still_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make dev` runs with its own signing key, metrics open and upstream endpoints on, as
    development allows (tests/test_dev_stack.py runs the whole of it)."""
    stack = DevStack(tmp_path, api_port=8000, temporal_port=7233, ui_port=8233)
    for name, value in stack._env(stack._dev_secrets()["jwt_secret"]).items():
        if name.startswith("MODEL_ROUTER_"):
            monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)
    assert settings.environment == "development" and settings.metrics_token is None
    assert create_app(settings)
