"""Which adapter serves a deployment, from its provider name (and the profile's modality)."""

from __future__ import annotations

from domain.enums import Modality
from providers.anthropic_adapter import AnthropicAdapter
from providers.base import ProviderAdapter
from providers.errors import ErrorKind, ProviderError
from providers.openai_adapter import OpenAIAdapter
from providers.rerank_adapter import RerankAdapter
from providers.secrets import Connection, SecretBroker
from providers.types import ProviderTimeouts

OPENAI = "openai"
ANTHROPIC = "anthropic"
# Servers that speak OpenAI's chat completions and embeddings protocol at their own address.
OPENAI_COMPATIBLE = frozenset(
    {
        "vllm",
        "ollama",
        "llamacpp",
        "llama-cpp",
        "lmstudio",
        "sglang",
        "tgi",
        "openai-compatible",
        "local-upstream",
        "upstream",
    }
)
RERANK_PROVIDERS = frozenset({"rerank", "cohere", "jina", "tei", "infinity"})


def adapter_kind(provider: str, modality: Modality | None = None) -> str:
    """ "openai", "anthropic" or "rerank"; ProviderError(unsupported) for anything else."""
    name = provider.lower()
    if modality is Modality.RERANK or name in RERANK_PROVIDERS:
        return "rerank"
    if name == ANTHROPIC:
        return "anthropic"
    if name == OPENAI or name in OPENAI_COMPATIBLE:
        return "openai"
    raise ProviderError(
        ErrorKind.UNSUPPORTED, provider=provider, reason=f"no adapter for provider {provider!r}"
    )


def build_adapter(
    provider: str,
    model: str,
    connection: Connection,
    *,
    timeouts: ProviderTimeouts,
    modality: Modality | None = None,
    prompt_caching: bool = True,
) -> ProviderAdapter:
    kind = adapter_kind(provider, modality)
    name = provider.lower()
    if kind == "rerank":
        return RerankAdapter(model=model, connection=connection, timeouts=timeouts, provider=name)
    if kind == "anthropic":
        # OpenAI caches prompt prefixes by itself; Anthropic needs breakpoints asked for.
        return AnthropicAdapter(
            model=model, connection=connection, timeouts=timeouts, prompt_caching=prompt_caching
        )
    if name != OPENAI and not connection.base_url:
        # A self-hosted server without an address would silently fall through to OpenAI.
        raise ProviderError(
            ErrorKind.INVALID_REQUEST,
            provider=provider,
            reason="an OpenAI-compatible server needs a base URL from its endpointRef",
        )
    return OpenAIAdapter(model=model, connection=connection, timeouts=timeouts, provider=name)


async def resolve_adapter(
    broker: SecretBroker,
    *,
    provider: str,
    model: str,
    endpoint_ref: str,
    timeouts: ProviderTimeouts,
    modality: Modality | None = None,
    prompt_caching: bool = True,
) -> ProviderAdapter:
    """Resolves the deployment's endpointRef through the broker and builds its adapter."""
    connection = await broker.resolve(endpoint_ref)
    return build_adapter(
        provider,
        model,
        connection,
        timeouts=timeouts,
        modality=modality,
        prompt_caching=prompt_caching,
    )
