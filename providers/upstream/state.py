"""Everything the simulator remembers: responders, faults, per-model settings, counters, a
ledger of requests (ids and usage only, never content) and the simulated prompt cache."""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel, Field

from providers.upstream.faults import ANY_MODEL, Fault, FaultBook
from providers.upstream.responders import Responder, default_responder


class ModelSettings(BaseModel):
    embedding_dimensions: int = Field(default=32, ge=1, le=8192)
    context_window: int | None = Field(default=None, ge=1)
    chunk_delay: float = Field(default=0.0, ge=0)  # seconds between streamed chunks
    # What the model's request ids start with: a provider, or a proxy in front of one, may send
    # ids far longer than OpenAI's and Anthropic's.
    request_id_prefix: str = Field(default="req_", min_length=1)
    # What the model's server refuses, in the provider's words (problems.refusal): "chat" on
    # the chat endpoints (404, as OpenAI answers for an embedding model), a request carrying
    # "temperature" (400, as OpenAI's reasoning models answer any but their default) or a
    # structured output format, "response_format" (400, as a model without it answers).
    refuses: list[Literal["chat", "temperature", "response_format"]] = Field(default_factory=list)


@dataclass(frozen=True)
class RequestRecord:
    """One request as a provider statement would list it. Status 0: never answered (hang)."""

    model: str
    endpoint: str
    status: int
    request_id: str
    response_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None


class RequestStats:
    """How many requests each (model, endpoint) received, counted on arrival, before faults."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()

    def record(self, model: str, endpoint: str) -> None:
        self._counts[(model, endpoint)] += 1

    def count(self, model: str | None = None, endpoint: str | None = None) -> int:
        return sum(
            n
            for (m, e), n in self._counts.items()
            if (model is None or m == model) and (endpoint is None or e == endpoint)
        )

    def models(self) -> set[str]:
        return {model for model, _ in self._counts}

    @property
    def total(self) -> int:
        return self.count()

    def snapshot(self) -> dict[str, object]:
        models: dict[str, dict[str, int]] = {}
        for (model, endpoint), n in sorted(self._counts.items()):
            models.setdefault(model, {})[endpoint] = n
        return {"total": self.total, "models": models}

    def reset(self) -> None:
        self._counts.clear()


class UpstreamState:
    def __init__(self, *, api_keys: set[str] | None = None, ledger_size: int = 10_000) -> None:
        self.responders: dict[str, Responder] = {}
        self.faults = FaultBook()
        self.stats = RequestStats()
        self.ledger: deque[RequestRecord] = deque(maxlen=ledger_size)
        self.settings: dict[str, ModelSettings] = {}
        # None accepts any non-empty key; a set accepts only those keys.
        self.api_keys = api_keys
        self.shutdown = asyncio.Event()
        # Set by `release()`: ends the delays under way (a slow first token, a keep-alive pause).
        self.released = asyncio.Event()
        self._cache: set[str] = set()

    def release(self) -> None:
        """End every delay under way now (a slow first token, a keep-alive pause), so that a
        test can let a held answer go at the moment it chooses; later delays run as given."""
        self.released.set()
        self.released = asyncio.Event()

    def register(self, model: str, responder: Responder) -> None:
        """Script `model` (or every unscripted model, with "*")."""
        self.responders[model] = responder

    def unregister(self, model: str) -> None:
        self.responders.pop(model, None)

    def responder_for(self, model: str) -> Responder:
        return self.responders.get(model) or self.responders.get(ANY_MODEL) or default_responder

    def inject(self, model: str, fault: Fault) -> None:
        self.faults.add(model, fault)

    def clear_faults(self, model: str | None = None) -> None:
        self.faults.clear(model)

    def configure(self, model: str, **settings: object) -> ModelSettings:
        current = self.settings_for(model).model_dump()
        current.update(settings)
        self.settings[model] = ModelSettings.model_validate(current)
        return self.settings[model]

    def settings_for(self, model: str) -> ModelSettings:
        return self.settings.get(model) or self.settings.get(ANY_MODEL) or ModelSettings()

    def known_models(self) -> list[str]:
        names = set(self.responders) | set(self.settings) | self.stats.models()
        return sorted(n for n in names if n and n != ANY_MODEL)

    def key_accepted(self, key: str | None) -> bool:
        if not key:
            return False
        return self.api_keys is None or key in self.api_keys

    def prompt_cache(self, model: str, prefixes: list[tuple[str, int]]) -> int:
        """Tokens of the longest prefix this model saw before (what a provider's prompt cache
        would serve); then remembers every prefix of this prompt."""
        keys = [(f"{model}\x00{digest}", tokens) for digest, tokens in prefixes]
        hit = next((tokens for key, tokens in reversed(keys) if key in self._cache), 0)
        self._cache.update(key for key, _ in keys)
        return hit

    def record(self, record: RequestRecord) -> None:
        self.ledger.append(record)

    def ledger_rows(self) -> list[dict[str, object]]:
        return [asdict(r) for r in self.ledger]

    def reset(self) -> None:
        """Back to a fresh simulator, keeping responders and per-model settings."""
        self.faults.clear()
        self.stats.reset()
        self.ledger.clear()
        self._cache.clear()
