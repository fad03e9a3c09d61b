"""The suite's own request and answer shapes, so the suite depends on no adapter.

Field names follow `providers/types.py` (ChatRequest, Message, ToolCall, Tool, ToolChoice,
ResponseFormat, Completion) so the evaluation runner's mapping is field-for-field; the one
difference is that the system prompt is a field here rather than a leading `system` message.
These carry the suite's prompts and a model's output: never store or log them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteToolCall(_Frozen):
    """`arguments` is the JSON text exactly as the model produced it (it may not parse)."""

    id: str
    name: str
    arguments: str = "{}"


class SuiteMessage(_Frozen):
    role: Literal["user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[SuiteToolCall, ...] = ()
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> SuiteMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self


class SuiteTool(_Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


class SuiteToolChoice(_Frozen):
    mode: Literal["auto", "none", "required", "tool"] = "auto"
    name: str | None = None

    @model_validator(mode="after")
    def _named(self) -> SuiteToolChoice:
        if (self.mode == "tool") != (self.name is not None):
            raise ValueError("name is given exactly when mode is 'tool'")
        return self


class SuiteResponseFormat(_Frozen):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    json_schema: dict[str, Any] | None = None
    strict: bool = True

    @model_validator(mode="after")
    def _schema(self) -> SuiteResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is given exactly when type is 'json_schema'")
        return self


class SuiteRequest(_Frozen):
    system: str = ""
    messages: tuple[SuiteMessage, ...] = Field(min_length=1)
    tools: tuple[SuiteTool, ...] = ()
    tool_choice: SuiteToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: SuiteResponseFormat | None = None
    max_tokens: int | None = Field(default=1024, ge=1)
    # Zero so a model's answer is as repeatable as its provider allows. A model that refuses
    # it (OpenAI's reasoning models take only their default) is asked without it.
    temperature: float = Field(default=0.0, ge=0, le=2)

    @property
    def optional_features(self) -> tuple[str, ...]:
        """The request parameters a model may not offer (structured output, a say over
        parallel tool calls), named as the wire protocol names them: a provider that refuses
        the request for one has not offered the feature the case tests, which scores the case
        failed, where a plain request refused says nothing about the model."""
        features = []
        if self.response_format is not None and self.response_format.type != "text":
            features.append("response_format")
        if self.parallel_tool_calls is not None and self.tools:
            features.append("parallel_tool_calls")
        return tuple(features)

    @property
    def first_user_text(self) -> str:
        return next((m.content or "" for m in self.messages if m.role == "user"), "")

    @property
    def assistant_turns(self) -> int:
        """How many answers the conversation already holds: the step a new answer is for."""
        return sum(1 for m in self.messages if m.role == "assistant")

    def tool(self, name: str) -> SuiteTool | None:
        return next((t for t in self.tools if t.name == name), None)

    def followed_by(self, *messages: SuiteMessage) -> SuiteRequest:
        return self.model_copy(update={"messages": (*self.messages, *messages)})


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "other"]


class SuiteAnswer(_Frozen):
    """One model answer, as `providers.types.Completion` folds it (usage left out)."""

    text: str = ""
    tool_calls: tuple[SuiteToolCall, ...] = ()
    finish_reason: FinishReason = "stop"

    def as_message(self) -> SuiteMessage:
        return SuiteMessage(role="assistant", content=self.text or None, tool_calls=self.tool_calls)


def user(text: str) -> SuiteMessage:
    return SuiteMessage(role="user", content=text)


def tool_result(call_id: str, text: str) -> SuiteMessage:
    return SuiteMessage(role="tool", content=text, tool_call_id=call_id)


def function(
    name: str,
    description: str,
    properties: dict[str, Any],
    required: tuple[str, ...] | None = None,
) -> SuiteTool:
    """A strict function tool: every listed property required unless `required` says which,
    and no undeclared argument allowed."""
    return SuiteTool(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": properties,
            "required": list(properties if required is None else required),
            "additionalProperties": False,
        },
    )
