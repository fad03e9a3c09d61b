"""OpenAI chat-completions wire shapes: requests in, responses and stream chunks out. What the
request model accepts but the normalised request cannot carry is refused in chat_refusals.py."""

from __future__ import annotations

import base64
import contextlib
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from api.chat_refusals import refuse_choice_type, refuse_unmapped
from domain.invocation import InvocationSummary
from domain.text import StoredName
from providers.types import (
    ChatRequest,
    Completion,
    Finish,
    Message,
    ResponseFormat,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
)


class _Loose(BaseModel):
    # Fields the model does not declare are kept, not refused by pydantic: at the top level
    # chat_refusals.refuse_unmapped names the one refused, in its words, or takes a hint
    # (`user`, `metadata`, …); within messages and tools they are accepted and ignored.
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Loose):
    name: str
    arguments: str = "{}"


class ToolCallIn(_Loose):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    # An assistant's refusal, as the SDK sends back a message it was answered with (content
    # null): its words, as a refusal part's are (it was dropped, the turn left empty).
    refusal: str | None = None
    # Who spoke (OpenAI's participant name, which the model reads): carried, not dropped as an
    # undeclared field is; a string, as OpenAI takes it (its own pattern is its to apply).
    name: str | None = None


class FunctionDef(_Loose):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class ToolIn(_Loose):
    type: Literal["function"] = "function"
    function: FunctionDef


class JsonSchemaFormat(_Loose):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None  # OpenAI's default: not strict


class ResponseFormatIn(_Loose):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Loose):
    include_usage: bool = False


class ChatCompletionIn(_Loose):
    model: StoredName = Field(min_length=1, max_length=200, description="A profile id")
    messages: list[MessageIn] = Field(min_length=1, max_length=10_000)
    tools: list[ToolIn] | None = Field(default=None, max_length=512)
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormatIn | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    stop: str | list[str] | None = None
    # null asks for nothing, as on the other surfaces: frameworks pass unset options through.
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=1, ge=1, le=1, description="Only one choice is supported")


class EmbeddingsIn(_Loose):
    model: StoredName = Field(min_length=1, max_length=200)
    input: str | list[str] = Field(description="Text or texts (token arrays are not accepted)")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)

    @field_validator("input", mode="before")
    @classmethod
    def _not_tokens(cls, value: Any) -> Any:
        """Token arrays said as such: LangChain's OpenAIEmbeddings sends them by default, and
        pydantic's words ("Input should be a valid string", twice) did not say what to do."""
        if isinstance(value, list) and value and not isinstance(value[0], str):
            raise ValueError(
                "token arrays are not accepted, only text: the deployment behind a profile may "
                "tokenize otherwise (with LangChain, OpenAIEmbeddings(check_embedding_ctx_length="
                "False) sends text)"
            )
        return value


# Content parts whose words the normalised message carries: text, and an assistant's refusal
# (its words, as a provider's own history would hold them).
_TEXT_PARTS = {"text": "text", "refusal": "refusal"}


def _text(content: str | list[dict[str, Any]] | None, index: int) -> str | None:
    """A message's words. A part the normalised request cannot carry (an image, audio, a file)
    is refused with a 422 naming it, never dropped: dropped, the model answered about an image
    it was never sent."""
    if content is None or isinstance(content, str):
        return content
    words = []
    for j, part in enumerate(content):
        kind = part.get("type", "text")
        field = _TEXT_PARTS.get(kind) if isinstance(kind, str) else None
        if field is None or not isinstance(part.get(field), str):
            raise RequestValidationError(
                [
                    {
                        "type": "value_error",
                        "loc": ("body", "messages", index, "content", j),
                        "msg": f"only text parts can be mapped (this one is {kind!r}); "
                        "it is refused, never dropped",
                        "input": None,
                    }
                ]
            )
        words.append(part[field])
    return "".join(words)


@contextlib.contextmanager
def field_errors(*loc: str | int) -> Iterator[None]:
    """The normalised types check rules the OpenAI shapes do not (a tool message needs its
    tool_call_id, …): a refusal there is the caller's 422 naming the field, not a 500."""
    try:
        yield
    except ValidationError as exc:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", *_where(loc, e["loc"])),
                    "msg": e["msg"],
                    "input": None,
                }
                for e in exc.errors()
            ]
        ) from None


def _where(loc: tuple[str | int, ...], within: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """The field a refusal names: the one given, or for the whole request's own checks the body,
    save `tool_choice` against its tools, which is the same field on every surface."""
    if loc or within[:1] != ("tool_choice",):
        return loc
    return ("tool_choice",)


def to_chat_request(body: ChatCompletionIn) -> ChatRequest:
    refuse_unmapped(body.model_extra or {})
    messages = []
    for index, m in enumerate(body.messages):
        role = "system" if m.role == "developer" else m.role
        name = m.name
        if name is not None and role == "tool":
            # OpenAI's tool message has no `name`: ignored on one, as every message's was
            # before names were carried (the normalised message refuses it).
            name = None
        with field_errors("messages", index):
            messages.append(
                Message(
                    role=role,
                    content=_text(m.content, index) or (m.refusal or None),
                    tool_calls=tuple(
                        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                        for c in m.tool_calls or []
                    ),
                    tool_call_id=m.tool_call_id,
                    name=name,
                )
            )
    choice: ToolChoice | None = None
    with field_errors("tool_choice"):
        if isinstance(body.tool_choice, str):
            choice = ToolChoice(mode=body.tool_choice)
        elif isinstance(body.tool_choice, dict):
            refuse_choice_type(body.tool_choice)
            function = body.tool_choice.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            choice = ToolChoice(mode="tool", name=name)
    fmt = None
    if body.response_format is not None:
        schema = body.response_format.json_schema
        with field_errors("response_format"):
            fmt = ResponseFormat(
                type=body.response_format.type,
                name=schema.name if schema else None,
                json_schema=schema.schema_ if schema else None,
                description=schema.description if schema else None,
                # OpenAI's default is not strict: sent strict, a schema written for the
                # default (not every property required, no additionalProperties: false) was
                # a 400 from OpenAI that the same request sent to it directly was not.
                strict=bool(schema and schema.strict),
            )
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    with field_errors():
        return ChatRequest(
            messages=tuple(messages),
            tools=tuple(
                Tool(
                    name=t.function.name,
                    description=t.function.description,
                    parameters=t.function.parameters,
                    strict=bool(t.function.strict),
                )
                for t in body.tools or []
            ),
            tool_choice=choice,
            parallel_tool_calls=body.parallel_tool_calls,
            response_format=fmt,
            max_tokens=body.max_completion_tokens or body.max_tokens,
            temperature=body.temperature,
            stop=stop,
        )


def _finish(reason: str) -> str:
    return reason if reason in ("stop", "length", "tool_calls", "content_filter") else "stop"


def refused_finish(finish: str) -> str:
    """A refusal's end on Chat Completions: `stop`, as OpenAI ends one (its SDK's `.parse()`
    raised on `content_filter`); a cut (`length`) stays one."""
    return "stop" if finish == "content_filter" else finish


def completion_body(
    invocation_id: uuid.UUID, profile: str, completion: Completion, usage: dict[str, int] | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.text or None}
    finish = _finish(completion.finish_reason)
    if completion.refusal:  # OpenAI's own field for it (providers.types.RefusalDelta)
        message["content"], message["refusal"] = None, completion.text
        finish = refused_finish(finish)
    if completion.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls
        ]
    body: dict[str, Any] = {
        "id": f"chatcmpl-{invocation_id.hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": profile,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def usage_body(summary: InvocationSummary) -> dict[str, Any] | None:
    """The call's usage as OpenAI words it, the prompt's cached part included (what cost
    trackers read: it was left out, every cache read counted as none)."""
    input_tokens, output_tokens = summary.input_tokens, summary.output_tokens
    if input_tokens is None or output_tokens is None:
        return None
    usage: dict[str, Any] = {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    if summary.cached_input_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": summary.cached_input_tokens}
    return usage


def chunk(
    invocation_id: uuid.UUID,
    profile: str,
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    created: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A `chat.completion.chunk`; `created` is its stream's (every chunk of one stream carries
    the same, as OpenAI's do), else now."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-{invocation_id.hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()) if created is None else created,
        "model": profile,
        "choices": (
            [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        ),
    }
    body.update(extra)
    return body


def delta_of(event: TextDelta | ToolCallDelta | Finish) -> tuple[dict[str, Any], str | None]:
    if isinstance(event, TextDelta):
        return {"content": event.text}, None
    if isinstance(event, ToolCallDelta):
        call: dict[str, Any] = {
            "index": event.index,
            "function": {"arguments": event.arguments_delta},
        }
        if event.id is not None:
            call["id"] = event.id
            call["type"] = "function"
        if event.name is not None:
            call["function"]["name"] = event.name
        return {"tool_calls": [call]}, None
    return {}, _finish(event.reason)


def encode_vector(vector: tuple[float, ...] | list[float], fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return list(vector)
