"""What the parts of an OpenAI chat or embeddings answer mean, read from the SDK's objects or
from a streamed chunk as a plain dict: its usage, its finish reason, its vectors, and a whole
completion as the events a stream would have carried (providers/openai_adapter.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from openai.types.chat import ChatCompletion
from openai.types.completion_usage import CompletionUsage

from providers.errors import ErrorKind, MalformedAnswer, ProviderError
from providers.types import (
    Finish,
    FinishReason,
    RefusalDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
    minted_call_id,
)
from providers.usage_figures import counts

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
}


def usage_event(usage: CompletionUsage | None) -> UsageEvent | None:
    if usage is None or usage.prompt_tokens is None or usage.completion_tokens is None:
        return None
    details = usage.prompt_tokens_details
    return _usage(
        usage.prompt_tokens,
        usage.completion_tokens,
        getattr(details, "cached_tokens", None),
        getattr(details, "cache_write_tokens", None),
    )


def _usage(
    prompt: object, completion: object, cached: object, written: object
) -> UsageEvent | None:
    """The usage event of a report's figures (providers/usage_figures.py): none when one of
    them states no count."""
    found = counts(prompt, completion, cached or 0, written or 0)
    if found is None:
        return None
    tokens_in, tokens_out, read, write = found
    return UsageEvent(
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cached_input_tokens=read,
        cache_write_input_tokens=write,
    )


def finish_reason(raw: str | None, saw_tool_calls: bool, refused: bool = False) -> FinishReason:
    """The answer's end. A refusal (OpenAI's `refusal` field: a structured-output request the
    model declines) is answered as its words, ended as a content filter ends one, on every
    surface alike: it was dropped, and the caller got an empty answer ended `stop`."""
    reason = _FINISH.get(raw or "", FinishReason.OTHER)
    if refused and reason is FinishReason.STOP:
        return FinishReason.CONTENT_FILTER
    # OpenAI reports "stop" when tool_choice forced a named function, some servers always do.
    return FinishReason.TOOL_CALLS if saw_tool_calls and reason is FinishReason.STOP else reason


def usage_from(raw: dict[str, Any] | None) -> UsageEvent | None:
    """`usage_event` for a chunk read as a plain dict."""
    if not raw or raw.get("prompt_tokens") is None or raw.get("completion_tokens") is None:
        return None
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}  # as the SDK's getattr reads it
    return _usage(
        raw["prompt_tokens"],
        raw["completion_tokens"],
        details.get("cached_tokens"),
        details.get("cache_write_tokens"),
    )


def embedding_vectors(data: Sequence[Any], inputs: int) -> tuple[tuple[float, ...], ...]:
    """One finite vector per input, in the inputs' order, from an embeddings answer's `data`;
    MalformedAnswer when the answer does not give exactly that."""
    by_index = {int(d.index): d.embedding for d in data}
    if len(data) != inputs or sorted(by_index) != list(range(inputs)):
        raise MalformedAnswer(f"{len(data)} vectors for {inputs} inputs")
    vectors = tuple(tuple(float(x) for x in by_index[i]) for i in range(inputs))
    # A NaN or an infinity makes the sum one too: one pass in C rather than a check per value
    # (values near float's limit, whose sum overflows, are refused as well: no embedding holds
    # such values).
    if not all(v and math.isfinite(sum(v)) for v in vectors):
        raise MalformedAnswer("a vector that is empty or holds a value that is not finite")
    return vectors


def completion_events(
    completion: ChatCompletion, request_id: str | None, provider: str
) -> Iterator[StreamEvent]:
    if not completion.choices:
        raise ProviderError(
            ErrorKind.SERVER, provider=provider, reason="the response has no choices"
        )
    choice = completion.choices[0]
    if choice.message.content:
        yield TextDelta(text=choice.message.content)
    refusal = getattr(choice.message, "refusal", None)
    if refusal:
        yield RefusalDelta(text=refusal)
    calls = choice.message.tool_calls or []
    for index, call in enumerate(calls):
        function = getattr(call, "function", None)
        yield ToolCallDelta(
            index=index,
            id=call.id or minted_call_id(),
            name=function.name if function else None,
            arguments_delta=function.arguments if function else "",
        )
    usage = usage_event(completion.usage)
    if usage is not None:
        yield usage
    yield Finish(
        reason=finish_reason(choice.finish_reason, bool(calls), bool(refusal)),
        provider_request_id=request_id,
        response_id=completion.id,
        response_model=completion.model,
    )
