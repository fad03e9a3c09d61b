"""Embeddings (OpenAI wire protocol) and rerank (the Cohere/Jina shape that self-hosted
rerankers such as vLLM and TEI-compatible servers serve). Both are deterministic: a vector is
a function of (model, input), a relevance score of (query, document); texts that share words
lie close, as a real model's near duplicates do (the evaluation's embedding check asks it)."""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from providers.upstream.answer import new_id
from providers.upstream.chat import BadRequest, read_body
from providers.upstream.faults import Endpoint, FaultKind, Flaw
from providers.upstream.openai_api import api_key
from providers.upstream.problems import (
    context_length_error,
    fault_response,
    malformed,
    openai_error,
)
from providers.upstream.state import RequestRecord, UpstreamState
from providers.upstream.streaming import DelayedResponse
from providers.upstream.tokens import count_tokens

_WORDS = re.compile(r"\w+")


def _hashed(seed: str, dimensions: int) -> list[float]:
    raw = hashlib.shake_256(seed.encode()).digest(dimensions * 4)
    values = [(n / 0xFFFFFFFF) * 2 - 1 for n in struct.unpack(f"<{dimensions}I", raw)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


# The whole text's own share of its vector, beside its words': two texts of the same words
# (in another order, or none) still differ, and near duplicates stay each other's closest.
_TEXT_SHARE = 0.25


def embedding_vector(model: str, text: str, dimensions: int) -> list[float]:
    """The sum of the text's words' vectors (a bag of words) and a share of its own, unit
    length."""
    values = [_TEXT_SHARE * v for v in _hashed(f"{model}\x00{text}", dimensions)]
    for word in _WORDS.findall(text.lower()):
        values = [
            a + b for a, b in zip(values, _hashed(f"{model}\x01{word}", dimensions), strict=True)
        ]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def relevance(query: str, document: str) -> float:
    """Word overlap with the query dominates, so relevant documents really rank first; a hash
    of the pair breaks ties deterministically."""
    q = {w.lower() for w in _WORDS.findall(query)}
    d = {w.lower() for w in _WORDS.findall(document)}
    overlap = len(q & d) / len(q) if q else 0.0
    jitter = hashlib.sha256(f"{query}\x00{document}".encode()).digest()[0] / 255
    return round(0.9 * overlap + 0.1 * jitter, 6)


def _inputs(raw: object) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
        return [" ".join(map(str, raw))]
    if isinstance(raw, list) and raw and all(isinstance(x, str | list) for x in raw):
        return [x if isinstance(x, str) else " ".join(map(str, x)) for x in raw]
    raise BadRequest("input must be a string, an array of strings, or token arrays")


@dataclass
class _Call:
    """One embeddings or rerank request past authentication and gate faults."""

    state: UpstreamState
    endpoint: Endpoint
    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    delay: float = 0.0
    flaw: Flaw | None = None  # a malformed_answer fault's

    @classmethod
    async def admit(
        cls, request: Request, endpoint: Endpoint, *, key_required: bool
    ) -> _Call | Response:
        state: UpstreamState = request.app.state.upstream
        headers = {"x-request-id": new_id("req_"), "x-upstream-simulator": "model-router"}
        try:
            body = await read_body(request)
        except BadRequest as exc:
            state.stats.record("", endpoint)  # a request all the same
            return openai_error(400, str(exc), headers=headers)
        model = body.get("model") if isinstance(body.get("model"), str) else ""
        call = cls(state, endpoint, str(model), body, headers)
        state.stats.record(call.model, endpoint)
        # Self-hosted rerankers often run without keys; embeddings endpoints never do.
        if (key_required or state.api_keys is not None) and not state.key_accepted(
            api_key(request)
        ):
            return call.reply(
                openai_error(401, "invalid api key", code="invalid_api_key", headers=headers)
            )
        gate, shapes = state.faults.take(call.model, endpoint)
        if gate is not None:
            rid = headers["x-request-id"]
            return call.reply(
                fault_response(
                    gate, "openai", headers=headers, request_id=rid, shutdown=state.shutdown
                )
            )
        call.delay = next((f.delay for f in shapes if f.kind is FaultKind.SLOW_FIRST_TOKEN), 0.0)
        call.flaw = next((f.flaw for f in shapes if f.kind is FaultKind.MALFORMED_ANSWER), None)
        return call

    def answer(self, payload: dict[str, Any], tokens: int) -> Response:
        """The answer, flawed as a malformed_answer fault says."""
        return self.reply(malformed(payload, self.flaw, self.headers), tokens)

    def reply(self, response: Response, tokens: int | None = None) -> Response:
        self.state.record(
            RequestRecord(
                model=self.model,
                endpoint=self.endpoint,
                status=response.status_code,
                request_id=self.headers["x-request-id"],
                input_tokens=tokens,
            )
        )
        if self.delay and response.status_code == 200:
            return DelayedResponse(response, self.delay, self.state.shutdown)
        return response

    def bad_request(self, message: str, param: str | None = None) -> Response:
        return self.reply(openai_error(400, message, param=param, headers=self.headers))


async def embeddings(request: Request) -> Response:
    call = await _Call.admit(request, "embeddings", key_required=True)
    if isinstance(call, Response):
        return call
    try:
        texts = _inputs(call.body.get("input"))
    except BadRequest as exc:
        return call.bad_request(str(exc), "input")
    settings = call.state.settings_for(call.model)
    dimensions = call.body.get("dimensions") or settings.embedding_dimensions
    if not isinstance(dimensions, int) or not 0 < dimensions <= 8192:
        return call.bad_request("dimensions must be an integer from 1 to 8192", "dimensions")
    counts = [count_tokens(t) for t in texts]
    window = settings.context_window
    if window is not None and max(counts) > window:
        rid = call.headers["x-request-id"]
        return call.reply(
            context_length_error(
                "openai", used=max(counts), window=window, headers=call.headers, request_id=rid
            )
        )
    as_base64 = call.body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector = embedding_vector(call.model, text, dimensions)
        if call.flaw == "not_finite" and index == 0:
            vector[0] = math.nan
        encoded: object = (
            base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            if as_base64
            else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    total = sum(counts)
    payload = {
        "object": "list",
        "data": data[:-1] if call.flaw == "missing" else data,
        "model": call.model,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }
    return call.answer(payload, total)


async def rerank(request: Request) -> Response:
    call = await _Call.admit(request, "rerank", key_required=False)
    if isinstance(call, Response):
        return call
    query, documents = call.body.get("query"), call.body.get("documents")
    if not isinstance(query, str) or not isinstance(documents, list):
        return call.bad_request("query (string) and documents (array) are required")
    texts = [d if isinstance(d, str) else str((d or {}).get("text", "")) for d in documents]
    ranked = sorted(
        ((i, relevance(query, t)) for i, t in enumerate(texts)), key=lambda p: (-p[1], p[0])
    )
    top_n = call.body.get("top_n")
    if isinstance(top_n, int) and top_n > 0 and call.flaw != "untrimmed":
        ranked = ranked[:top_n]
    results = []
    for index, score in ranked:
        item: dict[str, Any] = {"index": index, "relevance_score": score}
        if call.body.get("return_documents"):
            item["document"] = {"text": texts[index]}
        results.append(item)
    if results and call.flaw == "missing":
        results[0]["index"] = len(texts)
    if results and call.flaw == "not_finite":
        results[0]["relevance_score"] = math.nan
    tokens = count_tokens(query) * len(texts) + sum(count_tokens(t) for t in texts)
    payload = {
        "id": call.headers["x-request-id"],
        "model": call.model,
        "results": results,
        "usage": {"total_tokens": tokens},
        "meta": {"billed_units": {"search_units": 1}},
    }
    return call.answer(payload, tokens)
