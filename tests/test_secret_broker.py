"""The Secret Broker resolves endpointRefs without ever showing a credential."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from providers.errors import ErrorKind, ProviderError
from providers.registry import build_adapter, resolve_adapter
from providers.secrets import (
    UPSTREAM_DUMMY_KEY,
    CompositeSecretBroker,
    EnvSecretBroker,
    FileSecretBroker,
    SecretResolutionError,
    UpstreamSecretBroker,
    default_broker,
)
from providers.types import ChatRequest, Message, ProviderTimeouts
from providers.upstream import UpstreamServer

KEY = "sk-test-0123456789abcdef"


async def test_env_broker_reads_key_and_optional_base_url() -> None:
    broker = EnvSecretBroker(
        {"OPENAI_KEY": KEY, "VLLM_KEY": " k2 ", "VLLM_KEY_BASE_URL": "http://vllm:8000"}
    )
    plain = await broker.resolve("env:OPENAI_KEY")
    assert plain.api_key.get_secret_value() == KEY and plain.base_url is None
    hosted = await broker.resolve("env:VLLM_KEY")
    assert hosted.api_key.get_secret_value() == "k2" and hosted.base_url == "http://vllm:8000"
    assert KEY not in repr(plain) and KEY not in str(plain) and KEY not in plain.model_dump_json()


@pytest.mark.parametrize("ref", ["env:MISSING", "env:EMPTY", "env:not-a-name", "file:/x", "env"])
async def test_env_broker_refusals_name_the_ref_only(ref: str) -> None:
    broker = EnvSecretBroker({"EMPTY": "  ", "OTHER": KEY})
    with pytest.raises(SecretResolutionError) as caught:
        await broker.resolve(ref)
    assert KEY not in str(caught.value)


async def test_file_broker_bare_key_and_json(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.write_text(f"{KEY}\n")
    structured = tmp_path / "structured.json"
    structured.write_text(json.dumps({"api_key": KEY, "base_url": "http://llama:8080"}))
    broker = FileSecretBroker()
    first = await broker.resolve(f"file:{bare}")
    assert first.api_key.get_secret_value() == KEY and first.base_url is None
    second = await broker.resolve(f"file:{structured}")
    assert second.base_url == "http://llama:8080"
    assert KEY not in repr(second)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"api_key": "sk-test-0123456789abcdef", ', "invalid JSON"),
        ('{"base_url": "http://x"}', "no api_key"),
        ("sk-test-0123456789abcdef\nsecond line", "single-line"),
        ("", "single-line"),
        ('["sk-test-0123456789abcdef"]', "JSON object"),
        ("sk-test-0123456789abcdef trailing", "single-line"),
    ],
)
async def test_file_broker_rejects_bad_files_without_echoing_them(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "secret"
    path.write_text(content)
    with pytest.raises(SecretResolutionError) as caught:
        await FileSecretBroker().resolve(f"file:{path}")
    assert problem in str(caught.value)
    assert KEY not in str(caught.value)


async def test_file_broker_confines_paths(tmp_path: Path) -> None:
    allowed = tmp_path / "secrets"
    allowed.mkdir()
    (allowed / "ok").write_text(KEY)
    (tmp_path / "outside").write_text(KEY)
    broker = FileSecretBroker(allowed_dirs=[allowed])
    assert (await broker.resolve(f"file:{allowed / 'ok'}")).api_key.get_secret_value() == KEY
    for ref in (
        f"file:{tmp_path / 'outside'}",
        f"file:{allowed}/../outside",
        "file:relative/path",
        f"file:{allowed / 'missing'}",
    ):
        with pytest.raises(SecretResolutionError):
            await broker.resolve(ref)


async def test_upstream_scheme() -> None:
    broker = UpstreamSecretBroker()
    connection = await broker.resolve("upstream:127.0.0.1:8787")
    assert connection.base_url == "http://127.0.0.1:8787"
    assert connection.api_key.get_secret_value() == UPSTREAM_DUMMY_KEY
    for ref in ("upstream:127.0.0.1", "upstream:host:99999", "upstream:a b:80"):
        with pytest.raises(SecretResolutionError):
            await broker.resolve(ref)


async def test_composite_dispatches_by_scheme_and_refuses_unconfigured(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text(KEY)
    broker = CompositeSecretBroker(
        {"env": EnvSecretBroker({"A": "from-env"}), "file": FileSecretBroker()}
    )
    assert broker.schemes == {"env", "file"}
    assert (await broker.resolve("env:A")).api_key.get_secret_value() == "from-env"
    assert (await broker.resolve(f"file:{path}")).api_key.get_secret_value() == KEY
    for ref in ("vault:kv/openai", "pool:tenant-a/vllm", "secret:x", "upstream:127.0.0.1:1"):
        with pytest.raises(SecretResolutionError) as caught:
            await broker.resolve(ref)
        assert "no broker configured" in str(caught.value)
    production = default_broker()
    with pytest.raises(SecretResolutionError):
        await production.resolve("upstream:127.0.0.1:1")


@pytest.fixture(scope="module")
async def guarded_upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        server.state.api_keys = {KEY}
        yield server


async def test_a_brokered_key_authenticates_on_the_wire(
    tmp_path: Path, guarded_upstream: UpstreamServer
) -> None:
    """The simulator accepts only KEY: a file-resolved connection gets through, a wrong key is
    a non-retryable auth error, for both SDKs."""
    good, bad = tmp_path / "good.json", tmp_path / "bad"
    base_url = guarded_upstream.base_url
    good.write_text(json.dumps({"api_key": KEY, "base_url": base_url}))
    bad.write_text("wrong-key")
    broker = default_broker(file_dirs=[tmp_path])
    request = ChatRequest(messages=(Message(role="user", content="hi"),))
    timeouts = ProviderTimeouts(connect=2, read=5)
    for provider in ("vllm", "anthropic"):
        ok = await resolve_adapter(
            broker, provider=provider, model="m", endpoint_ref=f"file:{good}", timeouts=timeouts
        )
        async with ok:
            assert (await ok.complete(request)).text == "Echo: hi"
    bad_broker = CompositeSecretBroker({"file": FileSecretBroker()})
    bad_connection = await bad_broker.resolve(f"file:{bad}")
    bad_connection = bad_connection.model_copy(update={"base_url": base_url})
    for provider in ("vllm", "anthropic"):
        async with build_adapter(provider, "m", bad_connection, timeouts=timeouts) as rejected:
            with pytest.raises(ProviderError) as caught:
                await rejected.complete(request)
        assert caught.value.kind is ErrorKind.AUTH and not caught.value.transient
        assert "wrong-key" not in str(caught.value)
