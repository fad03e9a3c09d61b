"""What a scripted model sees (ChatTurn) and what it answers (Reply), independent of the wire
protocol the request came in on. Responders are written against these types only."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# A usage figure as a provider sends it: a count, or what a broken meter writes in its place
# (12.5, "12").
Figure = int | float | str


class ToolSpec(BaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolCallReply(BaseModel):
    """A tool call to answer with. `arguments` as a dict is serialised compactly; a string is
    sent as is (a deliberately malformed call is a string that is not JSON)."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None


class TurnMessage(BaseModel):
    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: list[ToolCallReply] = Field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False  # a tool result flagged as the tool's failure (Anthropic's wire)


class ChatTurn(BaseModel):
    """A chat request, parsed from either API. `raw` is the request body as received, for
    responders that need a provider-specific field."""

    model_config = ConfigDict(frozen=True)

    api: Literal["openai", "anthropic"]
    model: str
    system: str = ""
    messages: list[TurnMessage]
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: Literal["auto", "none", "required", "tool"] = "auto"
    tool_name: str | None = None
    parallel_tool_calls: bool = True
    response_format: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None
    max_tokens: int | None = None
    stop: list[str] = Field(default_factory=list)
    stream: bool = False
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    @property
    def last(self) -> TurnMessage:
        return self.messages[-1]

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.role == "user" and message.text:
                return message.text
        return ""

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class Reply(BaseModel):
    """A responder's answer.

    The simulator then applies the request's constraints the way a provider would: at most one
    tool call when parallel_tool_calls is false, none when tool_choice is none, the first stop
    sequence cuts the text, max_tokens truncates it (finish reason `length`). `verbatim=True`
    skips all of that, for responders that must misbehave on purpose.
    """

    text: str = ""
    tool_calls: list[ToolCallReply] = Field(default_factory=list)
    # Text the model says after its tool calls in the same turn, as Claude answers [text,
    # tool_use, text] and an OpenAI-compatible server (vLLM) may stream content after the
    # calls' deltas. Without calls left to stand between them it joins `text`.
    text_after_calls: str = ""
    finish_reason: (
        Literal["stop", "length", "tool_calls", "content_filter", "context_window"] | None
    ) = None
    cached_input_tokens: int | None = None
    # The usage to report instead of the counted one, as a provider with a broken meter would
    # (negative, past any real prompt, a fraction, a string): the figures are sent exactly as
    # given.
    reported_input_tokens: Figure | None = None
    reported_output_tokens: Figure | None = None
    # Stream the text in pieces of this many characters instead of a word each, cut wherever
    # they fall: a JavaScript proxy re-chunking by string index cuts between the two halves of
    # a surrogate pair (give the text's pairs as their halves, "\ud83d\ude00").
    text_piece: int | None = Field(default=None, ge=1)
    verbatim: bool = False
    # The model refuses, in these words: OpenAI's `refusal` (content null, finish `stop`, as
    # a structured-output request may be answered), Anthropic's `refusal` stop reason.
    refusal: str | None = None
