"""What Chat Completions refuses rather than drop: request settings the normalised request cannot
carry, fields it does not know, and tool_choice forms it cannot express. Each refusal is the
caller's 400 naming the field (api/problems.py turns the 422 of a validation error into OpenAI's
400 on this surface), never a setting silently lost. The top level is an allow list: the fields
the request model declares, the settings below at the value that asks for nothing, and the
hints that do not change the answer (`user`, `metadata`, …), as OpenAI refuses an unknown
argument. Anything else — a server's own setting (vLLM's `guided_json`, `min_p`,
`chat_template_kwargs`, Anthropic's `thinking`, …) — was taken and dropped: answered 200 with
none applied, and routed without the need it implied. A field sent as null asks for nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError

# Settings that change the answer and that the normalised request cannot carry: refused with a
# 422 naming the field when set, never dropped (dropped, `logprobs: true` came back as None and
# `reasoning_effort` or `web_search_options` were silently lost).
_UNMAPPED = (
    "top_k",
    "top_logprobs",
    "reasoning_effort",
    "verbosity",
    "web_search_options",
    "audio",
    "prediction",
    "seed",
    # The legacy function-calling fields: dropped, the model answered without the functions.
    "functions",
    "function_call",
)
_NOT_MAPPED = "cannot be mapped to the normalised request; it is refused, never dropped"
# Guarantees the gateway cannot keep, each with what the caller is told. `moderation` (the SDK's
# policy to block or score the input and the output) was accepted and dropped: a caller that
# asked for blocked input got its input sent on, unscreened. The Responses surface refuses it
# too (api/responses_shapes.py).
_UNKEPT = {
    "moderation": "a moderation policy cannot be applied by this gateway; it is refused, never "
    "dropped (screen the input before sending it)",
}
# Accepted at the value that asks for nothing (what some clients send explicitly).
_UNMAPPED_UNLESS_OFF: dict[str, Any] = {
    "top_p": 1,
    "logprobs": False,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": {},
}
# Hints that do not change the answer, accepted at any value and not passed on: who asks
# (`user`, `safety_identifier`), the caller's tags (`metadata`), and OpenAI's own storage,
# service tier and prompt cache settings, which concern an OpenAI account, not the answer (the
# Agents SDK passes `store` and the prompt cache's through from its ModelSettings). By default
# the official SDK, LangChain's ChatOpenAI and the Agents SDK send only declared fields here
# (`stream`, `stream_options`, `n`, `temperature`, …).
_HINTS = frozenset(
    {
        "user",
        "safety_identifier",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
    }
)
# Every undeclared field with its own rule above; any other is unknown.
_KNOWN = frozenset((*_UNMAPPED, *_UNKEPT, *_UNMAPPED_UNLESS_OFF, "modalities", *_HINTS))
_UNKNOWN = (
    "unknown parameter: this gateway does not apply it, and it may change the answer; it is "
    "refused, never dropped"
)
# The tool_choice objects the normalised request can express: a function by name.
_CHOICE_TYPES = ("function",)


def _refused(items: Sequence[tuple[tuple[str | int, ...], str]]) -> RequestValidationError:
    return RequestValidationError(
        [
            {"type": "value_error", "loc": ("body", *loc), "msg": msg, "input": None}
            for loc, msg in items
        ]
    )


def refuse_unmapped(extra: dict[str, Any]) -> None:
    """Refuse each undeclared field (`extra`, the model's extra fields) set to something the
    normalised request cannot carry or the gateway cannot keep, and each one it does not know;
    a null asks for nothing."""
    refused = [((name,), _NOT_MAPPED) for name in _UNMAPPED if extra.get(name) is not None]
    refused += [
        ((name,), _NOT_MAPPED)
        for name, off in _UNMAPPED_UNLESS_OFF.items()
        if extra.get(name) is not None and extra[name] != off
    ]
    modalities = extra.get("modalities")
    if modalities is not None and modalities != ["text"]:
        refused.append((("modalities",), _NOT_MAPPED))
    refused += [((name,), why) for name, why in _UNKEPT.items() if extra.get(name) is not None]
    refused += [
        ((name,), _UNKNOWN)
        for name in sorted(k for k, v in extra.items() if v is not None and k not in _KNOWN)
    ]
    if refused:
        raise _refused(refused)


def refuse_choice_type(choice: dict[str, Any]) -> None:
    """A tool_choice object of a form the normalised request cannot express (`allowed_tools`,
    `custom`, and whatever OpenAI adds next), refused naming its type. It fell through to the
    named-function form and was refused as "name is given exactly when mode is 'tool'", which
    said nothing of what was wrong."""
    kind = choice.get("type", "function")  # OpenAI's named form; clients omit the type
    if kind in _CHOICE_TYPES:
        return
    said = repr(kind) if isinstance(kind, str) and len(kind) <= 64 else "this type"
    raise _refused(
        [
            (
                ("tool_choice", "type"),
                f"tool_choice type {said} is not supported: only 'auto', 'none', 'required' "
                "or a function by name ({'type': 'function', 'function': {'name': …}})",
            )
        ]
    )
